// summary: @main(tensor<64x32xf32>, tensor<64xf32>, tensor<4x32xf32>, tensor<64x64xf32>, tensor<64xf32>, tensor<16x64xf32>, tensor<16xf32>) -> tensor<4x16xf32> | ops: arith.constant=1 stablehlo.add=15 stablehlo.broadcast_in_dim=9 stablehlo.clamp=2 stablehlo.constant=20 stablehlo.convert=1 stablehlo.divide=2 stablehlo.dot_general=3 stablehlo.exponential=1 stablehlo.logistic=1 stablehlo.multiply=22 stablehlo.reduce=2 stablehlo.reshape=3 stablehlo.rsqrt=1 stablehlo.subtract=1 stablehlo.transpose=3
// graph 0 of 1
module {
  func.func @main(%arg0: tensor<64x32xf32>, %arg1: tensor<64xf32>, %arg2: tensor<4x32xf32>, %arg3: tensor<64x64xf32>, %arg4: tensor<64xf32>, %arg5: tensor<16x64xf32>, %arg6: tensor<16xf32>) -> tensor<4x16xf32> {
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<4x64xf32>
    %cst_0 = stablehlo.constant dense<2.000000e+00> : tensor<4x64xf32>
    %cst_1 = stablehlo.constant dense<5.000000e-01> : tensor<4x64xf32>
    %cst_2 = stablehlo.constant dense<-4.000000e+00> : tensor<4x64xf32>
    %cst_3 = stablehlo.constant dense<4.000000e+00> : tensor<4x64xf32>
    %cst_4 = stablehlo.constant dense<-2.72614237E-10> : tensor<4x64xf32>
    %cst_5 = stablehlo.constant dense<2.77068146E-8> : tensor<4x64xf32>
    %cst_6 = stablehlo.constant dense<-2.10102394E-6> : tensor<4x64xf32>
    %cst_7 = stablehlo.constant dense<-5.69250624E-5> : tensor<4x64xf32>
    %cst_8 = stablehlo.constant dense<-7.34990637E-4> : tensor<4x64xf32>
    %cst_9 = stablehlo.constant dense<-2.954600e-03> : tensor<4x64xf32>
    %cst_10 = stablehlo.constant dense<-0.0160960332> : tensor<4x64xf32>
    %cst_11 = stablehlo.constant dense<-1.45660715E-5> : tensor<4x64xf32>
    %cst_12 = stablehlo.constant dense<-2.13374049E-4> : tensor<4x64xf32>
    %cst_13 = stablehlo.constant dense<-0.00168282702> : tensor<4x64xf32>
    %cst_14 = stablehlo.constant dense<-0.00737332925> : tensor<4x64xf32>
    %cst_15 = stablehlo.constant dense<-0.0142647391> : tensor<4x64xf32>
    %cst_16 = stablehlo.constant dense<-1.000000e+00> : tensor<4x64xf32>
    %cst_17 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %cst_18 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %cst_19 = arith.constant dense<1> : tensor<1xi64>
    %0 = stablehlo.transpose %arg0, dims = [1, 0] : (tensor<64x32xf32>) -> tensor<32x64xf32>
    %1 = stablehlo.dot_general %arg2, %0, contracting_dims = [1] x [0] : (tensor<4x32xf32>, tensor<32x64xf32>) -> tensor<4x64xf32>
    %2 = stablehlo.convert %cst_19 : (tensor<1xi64>) -> tensor<1xf32>
    %3 = stablehlo.reshape %2 : (tensor<1xf32>) -> tensor<f32>
    %4 = stablehlo.broadcast_in_dim %3, dims = [] : (tensor<f32>) -> tensor<4x64xf32>
    %5 = stablehlo.multiply %1, %4 : tensor<4x64xf32>
    %6 = stablehlo.broadcast_in_dim %3, dims = [] : (tensor<f32>) -> tensor<64xf32>
    %7 = stablehlo.multiply %arg1, %6 : tensor<64xf32>
    %8 = stablehlo.broadcast_in_dim %7, dims = [1] : (tensor<64xf32>) -> tensor<4x64xf32>
    %9 = stablehlo.add %5, %8 : tensor<4x64xf32>
    %10 = stablehlo.multiply %9, %cst_1 : tensor<4x64xf32>
    %11 = stablehlo.rsqrt %cst_0 : tensor<4x64xf32>
    %12 = stablehlo.multiply %9, %11 : tensor<4x64xf32>
    %13 = stablehlo.clamp %cst_2, %12, %cst_3 : tensor<4x64xf32>
    %14 = stablehlo.multiply %13, %13 : tensor<4x64xf32>
    %15 = stablehlo.multiply %cst_4, %14 : tensor<4x64xf32>
    %16 = stablehlo.add %15, %cst_5 : tensor<4x64xf32>
    %17 = stablehlo.multiply %16, %14 : tensor<4x64xf32>
    %18 = stablehlo.add %17, %cst_6 : tensor<4x64xf32>
    %19 = stablehlo.multiply %18, %14 : tensor<4x64xf32>
    %20 = stablehlo.add %19, %cst_7 : tensor<4x64xf32>
    %21 = stablehlo.multiply %20, %14 : tensor<4x64xf32>
    %22 = stablehlo.add %21, %cst_8 : tensor<4x64xf32>
    %23 = stablehlo.multiply %22, %14 : tensor<4x64xf32>
    %24 = stablehlo.add %23, %cst_9 : tensor<4x64xf32>
    %25 = stablehlo.multiply %24, %14 : tensor<4x64xf32>
    %26 = stablehlo.add %25, %cst_10 : tensor<4x64xf32>
    %27 = stablehlo.multiply %cst_11, %14 : tensor<4x64xf32>
    %28 = stablehlo.add %27, %cst_12 : tensor<4x64xf32>
    %29 = stablehlo.multiply %28, %14 : tensor<4x64xf32>
    %30 = stablehlo.add %29, %cst_13 : tensor<4x64xf32>
    %31 = stablehlo.multiply %30, %14 : tensor<4x64xf32>
    %32 = stablehlo.add %31, %cst_14 : tensor<4x64xf32>
    %33 = stablehlo.multiply %32, %14 : tensor<4x64xf32>
    %34 = stablehlo.add %33, %cst_15 : tensor<4x64xf32>
    %35 = stablehlo.multiply %13, %26 : tensor<4x64xf32>
    %36 = stablehlo.divide %35, %34 : tensor<4x64xf32>
    %37 = stablehlo.clamp %cst_16, %36, %cst : tensor<4x64xf32>
    %38 = stablehlo.add %37, %cst : tensor<4x64xf32>
    %39 = stablehlo.multiply %38, %10 : tensor<4x64xf32>
    %40 = stablehlo.transpose %arg3, dims = [1, 0] : (tensor<64x64xf32>) -> tensor<64x64xf32>
    %41 = stablehlo.dot_general %39, %40, contracting_dims = [1] x [0] : (tensor<4x64xf32>, tensor<64x64xf32>) -> tensor<4x64xf32>
    %42 = stablehlo.multiply %41, %4 : tensor<4x64xf32>
    %43 = stablehlo.multiply %arg4, %6 : tensor<64xf32>
    %44 = stablehlo.broadcast_in_dim %43, dims = [1] : (tensor<64xf32>) -> tensor<4x64xf32>
    %45 = stablehlo.add %42, %44 : tensor<4x64xf32>
    %46 = stablehlo.logistic %45 : tensor<4x64xf32>
    %47 = stablehlo.multiply %45, %46 : tensor<4x64xf32>
    %48 = stablehlo.add %47, %39 : tensor<4x64xf32>
    %49 = stablehlo.transpose %arg5, dims = [1, 0] : (tensor<16x64xf32>) -> tensor<64x16xf32>
    %50 = stablehlo.dot_general %48, %49, contracting_dims = [1] x [0] : (tensor<4x64xf32>, tensor<64x16xf32>) -> tensor<4x16xf32>
    %51 = stablehlo.broadcast_in_dim %3, dims = [] : (tensor<f32>) -> tensor<4x16xf32>
    %52 = stablehlo.multiply %50, %51 : tensor<4x16xf32>
    %53 = stablehlo.broadcast_in_dim %3, dims = [] : (tensor<f32>) -> tensor<16xf32>
    %54 = stablehlo.multiply %arg6, %53 : tensor<16xf32>
    %55 = stablehlo.broadcast_in_dim %54, dims = [1] : (tensor<16xf32>) -> tensor<4x16xf32>
    %56 = stablehlo.add %52, %55 : tensor<4x16xf32>
    %57 = stablehlo.reduce(%56 init: %cst_17) applies stablehlo.maximum across dimensions = [1] : (tensor<4x16xf32>, tensor<f32>) -> tensor<4xf32>
    %58 = stablehlo.reshape %57 : (tensor<4xf32>) -> tensor<4x1xf32>
    %59 = stablehlo.broadcast_in_dim %58, dims = [0, 1] : (tensor<4x1xf32>) -> tensor<4x16xf32>
    %60 = stablehlo.subtract %56, %59 : tensor<4x16xf32>
    %61 = stablehlo.exponential %60 : tensor<4x16xf32>
    %62 = stablehlo.reduce(%61 init: %cst_18) applies stablehlo.add across dimensions = [1] : (tensor<4x16xf32>, tensor<f32>) -> tensor<4xf32>
    %63 = stablehlo.reshape %62 : (tensor<4xf32>) -> tensor<4x1xf32>
    %64 = stablehlo.broadcast_in_dim %63, dims = [0, 1] : (tensor<4x1xf32>) -> tensor<4x16xf32>
    %65 = stablehlo.divide %61, %64 : tensor<4x16xf32>
    return %65 : tensor<4x16xf32>
  }
}
