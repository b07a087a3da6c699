// summary: @main(tensor<32x3x4x4xf32>, tensor<32xf32>, tensor<2x3x16x16xf32>, tensor<1x16x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<96x32xf32>, tensor<96xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<64x32xf32>, tensor<64xf32>, tensor<32x64xf32>, tensor<32xf32>, tensor<10x32xf32>, tensor<10xf32>) -> tensor<2x10xf32> | ops: arith.constant=6 stablehlo.add=24 stablehlo.broadcast_in_dim=39 stablehlo.clamp=2 stablehlo.compare=1 stablehlo.constant=23 stablehlo.convert=12 stablehlo.convolution=1 stablehlo.divide=9 stablehlo.dot_general=7 stablehlo.exponential=1 stablehlo.multiply=31 stablehlo.not=2 stablehlo.reduce=10 stablehlo.reshape=36 stablehlo.rsqrt=3 stablehlo.select=1 stablehlo.slice=3 stablehlo.subtract=5 stablehlo.transpose=13
// graph 0 of 1
module {
  func.func @main(%arg0: tensor<32x3x4x4xf32>, %arg1: tensor<32xf32>, %arg2: tensor<2x3x16x16xf32>, %arg3: tensor<1x16x32xf32>, %arg4: tensor<32xf32>, %arg5: tensor<32xf32>, %arg6: tensor<96x32xf32>, %arg7: tensor<96xf32>, %arg8: tensor<32x32xf32>, %arg9: tensor<32xf32>, %arg10: tensor<32xf32>, %arg11: tensor<32xf32>, %arg12: tensor<64x32xf32>, %arg13: tensor<64xf32>, %arg14: tensor<32x64xf32>, %arg15: tensor<32xf32>, %arg16: tensor<10x32xf32>, %arg17: tensor<10xf32>) -> tensor<2x10xf32> {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<2x4x16x16xf32>
    %cst_0 = stablehlo.constant dense<0.000000e+00> : tensor<f64>
    %cst_1 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %cst_2 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %c = stablehlo.constant dense<false> : tensor<i1>
    %cst_3 = stablehlo.constant dense<1.000000e+00> : tensor<2x16x64xf32>
    %cst_4 = stablehlo.constant dense<2.000000e+00> : tensor<2x16x64xf32>
    %cst_5 = stablehlo.constant dense<5.000000e-01> : tensor<2x16x64xf32>
    %cst_6 = stablehlo.constant dense<-4.000000e+00> : tensor<2x16x64xf32>
    %cst_7 = stablehlo.constant dense<4.000000e+00> : tensor<2x16x64xf32>
    %cst_8 = stablehlo.constant dense<-2.72614237E-10> : tensor<2x16x64xf32>
    %cst_9 = stablehlo.constant dense<2.77068146E-8> : tensor<2x16x64xf32>
    %cst_10 = stablehlo.constant dense<-2.10102394E-6> : tensor<2x16x64xf32>
    %cst_11 = stablehlo.constant dense<-5.69250624E-5> : tensor<2x16x64xf32>
    %cst_12 = stablehlo.constant dense<-7.34990637E-4> : tensor<2x16x64xf32>
    %cst_13 = stablehlo.constant dense<-2.954600e-03> : tensor<2x16x64xf32>
    %cst_14 = stablehlo.constant dense<-0.0160960332> : tensor<2x16x64xf32>
    %cst_15 = stablehlo.constant dense<-1.45660715E-5> : tensor<2x16x64xf32>
    %cst_16 = stablehlo.constant dense<-2.13374049E-4> : tensor<2x16x64xf32>
    %cst_17 = stablehlo.constant dense<-0.00168282702> : tensor<2x16x64xf32>
    %cst_18 = stablehlo.constant dense<-0.00737332925> : tensor<2x16x64xf32>
    %cst_19 = stablehlo.constant dense<-0.0142647391> : tensor<2x16x64xf32>
    %cst_20 = stablehlo.constant dense<-1.000000e+00> : tensor<2x16x64xf32>
    %cst_21 = arith.constant dense<32> : tensor<1xi64>
    %cst_22 = arith.constant dense<9.9999997473787516E-6> : tensor<1xf64>
    %cst_23 = arith.constant dense<1> : tensor<1xi64>
    %cst_24 = arith.constant dense<0.59460353851318359> : tensor<1xf64>
    %cst_25 = arith.constant dense<0xFFF0000000000000> : tensor<1xf64>
    %cst_26 = arith.constant dense<16> : tensor<1xi64>
    %0 = stablehlo.convolution(%arg2, %arg0) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [4, 4], pad = [[0, 0], [0, 0]], rhs_dilate = [1, 1]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x3x16x16xf32>, tensor<32x3x4x4xf32>) -> tensor<2x32x4x4xf32>
    %1 = stablehlo.reshape %arg1 : (tensor<32xf32>) -> tensor<32x1x1xf32>
    %2 = stablehlo.broadcast_in_dim %1, dims = [1, 2, 3] : (tensor<32x1x1xf32>) -> tensor<2x32x4x4xf32>
    %3 = stablehlo.add %0, %2 : tensor<2x32x4x4xf32>
    %4 = stablehlo.reshape %3 : (tensor<2x32x4x4xf32>) -> tensor<2x32x16xf32>
    %5 = stablehlo.transpose %4, dims = [0, 2, 1] : (tensor<2x32x16xf32>) -> tensor<2x16x32xf32>
    %6 = stablehlo.broadcast_in_dim %arg3, dims = [0, 1, 2] : (tensor<1x16x32xf32>) -> tensor<2x16x32xf32>
    %7 = stablehlo.add %5, %6 : tensor<2x16x32xf32>
    %8 = stablehlo.convert %7 : (tensor<2x16x32xf32>) -> tensor<2x16x32xf64>
    %9 = stablehlo.reduce(%8 init: %cst_0) applies stablehlo.add across dimensions = [2] : (tensor<2x16x32xf64>, tensor<f64>) -> tensor<2x16xf64>
    %10 = stablehlo.reshape %9 : (tensor<2x16xf64>) -> tensor<2x16x1xf64>
    %11 = stablehlo.convert %cst_21 : (tensor<1xi64>) -> tensor<1xf64>
    %12 = stablehlo.reshape %11 : (tensor<1xf64>) -> tensor<f64>
    %13 = stablehlo.broadcast_in_dim %12, dims = [] : (tensor<f64>) -> tensor<2x16x1xf64>
    %14 = stablehlo.divide %10, %13 : tensor<2x16x1xf64>
    %15 = stablehlo.broadcast_in_dim %14, dims = [0, 1, 2] : (tensor<2x16x1xf64>) -> tensor<2x16x32xf64>
    %16 = stablehlo.subtract %8, %15 : tensor<2x16x32xf64>
    %17 = stablehlo.multiply %16, %16 : tensor<2x16x32xf64>
    %18 = stablehlo.reduce(%17 init: %cst_0) applies stablehlo.add across dimensions = [2] : (tensor<2x16x32xf64>, tensor<f64>) -> tensor<2x16xf64>
    %19 = stablehlo.reshape %18 : (tensor<2x16xf64>) -> tensor<2x16x1xf64>
    %20 = stablehlo.divide %19, %13 : tensor<2x16x1xf64>
    %21 = stablehlo.convert %20 : (tensor<2x16x1xf64>) -> tensor<2x16x1xf32>
    %22 = stablehlo.reduce(%7 init: %cst_1) applies stablehlo.add across dimensions = [2] : (tensor<2x16x32xf32>, tensor<f32>) -> tensor<2x16xf32>
    %23 = stablehlo.reshape %22 : (tensor<2x16xf32>) -> tensor<2x16x1xf32>
    %24 = stablehlo.convert %cst_21 : (tensor<1xi64>) -> tensor<1xf32>
    %25 = stablehlo.reshape %24 : (tensor<1xf32>) -> tensor<f32>
    %26 = stablehlo.broadcast_in_dim %25, dims = [] : (tensor<f32>) -> tensor<2x16x1xf32>
    %27 = stablehlo.divide %23, %26 : tensor<2x16x1xf32>
    %28 = stablehlo.convert %cst_22 : (tensor<1xf64>) -> tensor<1xf32>
    %29 = stablehlo.reshape %28 : (tensor<1xf32>) -> tensor<f32>
    %30 = stablehlo.broadcast_in_dim %29, dims = [] : (tensor<f32>) -> tensor<2x16x1xf32>
    %31 = stablehlo.add %21, %30 : tensor<2x16x1xf32>
    %32 = stablehlo.rsqrt %31 : tensor<2x16x1xf32>
    %33 = stablehlo.broadcast_in_dim %27, dims = [0, 1, 2] : (tensor<2x16x1xf32>) -> tensor<2x16x32xf32>
    %34 = stablehlo.subtract %7, %33 : tensor<2x16x32xf32>
    %35 = stablehlo.broadcast_in_dim %32, dims = [0, 1, 2] : (tensor<2x16x1xf32>) -> tensor<2x16x32xf32>
    %36 = stablehlo.multiply %34, %35 : tensor<2x16x32xf32>
    %37 = stablehlo.broadcast_in_dim %arg4, dims = [2] : (tensor<32xf32>) -> tensor<2x16x32xf32>
    %38 = stablehlo.multiply %36, %37 : tensor<2x16x32xf32>
    %39 = stablehlo.broadcast_in_dim %arg5, dims = [2] : (tensor<32xf32>) -> tensor<2x16x32xf32>
    %40 = stablehlo.add %38, %39 : tensor<2x16x32xf32>
    %41 = stablehlo.reshape %40 : (tensor<2x16x32xf32>) -> tensor<32x32xf32>
    %42 = stablehlo.transpose %arg6, dims = [1, 0] : (tensor<96x32xf32>) -> tensor<32x96xf32>
    %43 = stablehlo.dot_general %41, %42, contracting_dims = [1] x [0] : (tensor<32x32xf32>, tensor<32x96xf32>) -> tensor<32x96xf32>
    %44 = stablehlo.convert %cst_23 : (tensor<1xi64>) -> tensor<1xf32>
    %45 = stablehlo.reshape %44 : (tensor<1xf32>) -> tensor<f32>
    %46 = stablehlo.broadcast_in_dim %45, dims = [] : (tensor<f32>) -> tensor<32x96xf32>
    %47 = stablehlo.multiply %43, %46 : tensor<32x96xf32>
    %48 = stablehlo.broadcast_in_dim %45, dims = [] : (tensor<f32>) -> tensor<96xf32>
    %49 = stablehlo.multiply %arg7, %48 : tensor<96xf32>
    %50 = stablehlo.broadcast_in_dim %49, dims = [1] : (tensor<96xf32>) -> tensor<32x96xf32>
    %51 = stablehlo.add %47, %50 : tensor<32x96xf32>
    %52 = stablehlo.reshape %51 : (tensor<32x96xf32>) -> tensor<2x16x96xf32>
    %53 = stablehlo.slice %52 [0:2, 0:16, 0:32] : (tensor<2x16x96xf32>) -> tensor<2x16x32xf32>
    %54 = stablehlo.slice %52 [0:2, 0:16, 32:64] : (tensor<2x16x96xf32>) -> tensor<2x16x32xf32>
    %55 = stablehlo.slice %52 [0:2, 0:16, 64:96] : (tensor<2x16x96xf32>) -> tensor<2x16x32xf32>
    %56 = stablehlo.reshape %53 : (tensor<2x16x32xf32>) -> tensor<2x16x4x8xf32>
    %57 = stablehlo.transpose %56, dims = [0, 2, 1, 3] : (tensor<2x16x4x8xf32>) -> tensor<2x4x16x8xf32>
    %58 = stablehlo.reshape %54 : (tensor<2x16x32xf32>) -> tensor<2x16x4x8xf32>
    %59 = stablehlo.transpose %58, dims = [0, 2, 1, 3] : (tensor<2x16x4x8xf32>) -> tensor<2x4x16x8xf32>
    %60 = stablehlo.reshape %55 : (tensor<2x16x32xf32>) -> tensor<2x16x4x8xf32>
    %61 = stablehlo.transpose %60, dims = [0, 2, 1, 3] : (tensor<2x16x4x8xf32>) -> tensor<2x4x16x8xf32>
    %62 = stablehlo.convert %cst_24 : (tensor<1xf64>) -> tensor<1xf32>
    %63 = stablehlo.reshape %62 : (tensor<1xf32>) -> tensor<f32>
    %64 = stablehlo.broadcast_in_dim %63, dims = [] : (tensor<f32>) -> tensor<2x4x16x8xf32>
    %65 = stablehlo.multiply %57, %64 : tensor<2x4x16x8xf32>
    %66 = stablehlo.transpose %59, dims = [0, 1, 3, 2] : (tensor<2x4x16x8xf32>) -> tensor<2x4x8x16xf32>
    %67 = stablehlo.broadcast_in_dim %63, dims = [] : (tensor<f32>) -> tensor<2x4x8x16xf32>
    %68 = stablehlo.multiply %66, %67 : tensor<2x4x8x16xf32>
    %69 = stablehlo.reshape %65 : (tensor<2x4x16x8xf32>) -> tensor<8x16x8xf32>
    %70 = stablehlo.reshape %68 : (tensor<2x4x8x16xf32>) -> tensor<8x8x16xf32>
    %71 = stablehlo.broadcast_in_dim %70, dims = [0, 1, 2] : (tensor<8x8x16xf32>) -> tensor<8x8x16xf32>
    %72 = stablehlo.dot_general %69, %71, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<8x16x8xf32>, tensor<8x8x16xf32>) -> tensor<8x16x16xf32>
    %73 = stablehlo.reshape %72 : (tensor<8x16x16xf32>) -> tensor<2x4x16x16xf32>
    %74 = stablehlo.reduce(%73 init: %cst_2) applies stablehlo.maximum across dimensions = [3] : (tensor<2x4x16x16xf32>, tensor<f32>) -> tensor<2x4x16xf32>
    %75 = stablehlo.reshape %74 : (tensor<2x4x16xf32>) -> tensor<2x4x16x1xf32>
    %76 = stablehlo.broadcast_in_dim %75, dims = [0, 1, 2, 3] : (tensor<2x4x16x1xf32>) -> tensor<2x4x16x16xf32>
    %77 = stablehlo.subtract %73, %76 : tensor<2x4x16x16xf32>
    %78 = stablehlo.exponential %77 : tensor<2x4x16x16xf32>
    %79 = stablehlo.reduce(%78 init: %cst_1) applies stablehlo.add across dimensions = [3] : (tensor<2x4x16x16xf32>, tensor<f32>) -> tensor<2x4x16xf32>
    %80 = stablehlo.reshape %79 : (tensor<2x4x16xf32>) -> tensor<2x4x16x1xf32>
    %81 = stablehlo.broadcast_in_dim %80, dims = [0, 1, 2, 3] : (tensor<2x4x16x1xf32>) -> tensor<2x4x16x16xf32>
    %82 = stablehlo.divide %78, %81 : tensor<2x4x16x16xf32>
    %83 = stablehlo.convert %cst_25 : tensor<1xf64>
    %84 = stablehlo.reshape %83 : (tensor<1xf64>) -> tensor<f64>
    %85 = stablehlo.convert %84 : (tensor<f64>) -> tensor<f32>
    %86 = stablehlo.broadcast_in_dim %85, dims = [] : (tensor<f32>) -> tensor<2x4x16x16xf32>
    %87 = stablehlo.compare EQ, %73, %86, FLOAT : (tensor<2x4x16x16xf32>, tensor<2x4x16x16xf32>) -> tensor<2x4x16x16xi1>
    %88 = stablehlo.not %87 : tensor<2x4x16x16xi1>
    %89 = stablehlo.reduce(%88 init: %c) applies stablehlo.or across dimensions = [3] : (tensor<2x4x16x16xi1>, tensor<i1>) -> tensor<2x4x16xi1>
    %90 = stablehlo.reshape %89 : (tensor<2x4x16xi1>) -> tensor<2x4x16x1xi1>
    %91 = stablehlo.not %90 : tensor<2x4x16x1xi1>
    %92 = stablehlo.broadcast_in_dim %91, dims = [0, 1, 2, 3] : (tensor<2x4x16x1xi1>) -> tensor<2x4x16x16xi1>
    %93 = stablehlo.broadcast_in_dim %cst, dims = [0, 1, 2, 3] : (tensor<2x4x16x16xf32>) -> tensor<2x4x16x16xf32>
    %94 = stablehlo.broadcast_in_dim %82, dims = [0, 1, 2, 3] : (tensor<2x4x16x16xf32>) -> tensor<2x4x16x16xf32>
    %95 = stablehlo.select %92, %93, %94 : tensor<2x4x16x16xi1>, tensor<2x4x16x16xf32>
    %96 = stablehlo.reshape %95 : (tensor<2x4x16x16xf32>) -> tensor<8x16x16xf32>
    %97 = stablehlo.reshape %61 : (tensor<2x4x16x8xf32>) -> tensor<8x16x8xf32>
    %98 = stablehlo.broadcast_in_dim %97, dims = [0, 1, 2] : (tensor<8x16x8xf32>) -> tensor<8x16x8xf32>
    %99 = stablehlo.dot_general %96, %98, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<8x16x16xf32>, tensor<8x16x8xf32>) -> tensor<8x16x8xf32>
    %100 = stablehlo.reshape %99 : (tensor<8x16x8xf32>) -> tensor<2x4x16x8xf32>
    %101 = stablehlo.transpose %100, dims = [2, 0, 1, 3] : (tensor<2x4x16x8xf32>) -> tensor<16x2x4x8xf32>
    %102 = stablehlo.transpose %101, dims = [1, 2, 0, 3] : (tensor<16x2x4x8xf32>) -> tensor<2x4x16x8xf32>
    %103 = stablehlo.transpose %102, dims = [0, 2, 1, 3] : (tensor<2x4x16x8xf32>) -> tensor<2x16x4x8xf32>
    %104 = stablehlo.reshape %103 : (tensor<2x16x4x8xf32>) -> tensor<2x16x32xf32>
    %105 = stablehlo.transpose %arg8, dims = [1, 0] : (tensor<32x32xf32>) -> tensor<32x32xf32>
    %106 = stablehlo.reshape %104 : (tensor<2x16x32xf32>) -> tensor<32x32xf32>
    %107 = stablehlo.dot_general %106, %105, contracting_dims = [1] x [0] : (tensor<32x32xf32>, tensor<32x32xf32>) -> tensor<32x32xf32>
    %108 = stablehlo.reshape %107 : (tensor<32x32xf32>) -> tensor<2x16x32xf32>
    %109 = stablehlo.broadcast_in_dim %arg9, dims = [2] : (tensor<32xf32>) -> tensor<2x16x32xf32>
    %110 = stablehlo.add %108, %109 : tensor<2x16x32xf32>
    %111 = stablehlo.add %7, %110 : tensor<2x16x32xf32>
    %112 = stablehlo.convert %111 : (tensor<2x16x32xf32>) -> tensor<2x16x32xf64>
    %113 = stablehlo.reduce(%112 init: %cst_0) applies stablehlo.add across dimensions = [2] : (tensor<2x16x32xf64>, tensor<f64>) -> tensor<2x16xf64>
    %114 = stablehlo.reshape %113 : (tensor<2x16xf64>) -> tensor<2x16x1xf64>
    %115 = stablehlo.divide %114, %13 : tensor<2x16x1xf64>
    %116 = stablehlo.broadcast_in_dim %115, dims = [0, 1, 2] : (tensor<2x16x1xf64>) -> tensor<2x16x32xf64>
    %117 = stablehlo.subtract %112, %116 : tensor<2x16x32xf64>
    %118 = stablehlo.multiply %117, %117 : tensor<2x16x32xf64>
    %119 = stablehlo.reduce(%118 init: %cst_0) applies stablehlo.add across dimensions = [2] : (tensor<2x16x32xf64>, tensor<f64>) -> tensor<2x16xf64>
    %120 = stablehlo.reshape %119 : (tensor<2x16xf64>) -> tensor<2x16x1xf64>
    %121 = stablehlo.divide %120, %13 : tensor<2x16x1xf64>
    %122 = stablehlo.convert %121 : (tensor<2x16x1xf64>) -> tensor<2x16x1xf32>
    %123 = stablehlo.reduce(%111 init: %cst_1) applies stablehlo.add across dimensions = [2] : (tensor<2x16x32xf32>, tensor<f32>) -> tensor<2x16xf32>
    %124 = stablehlo.reshape %123 : (tensor<2x16xf32>) -> tensor<2x16x1xf32>
    %125 = stablehlo.divide %124, %26 : tensor<2x16x1xf32>
    %126 = stablehlo.add %122, %30 : tensor<2x16x1xf32>
    %127 = stablehlo.rsqrt %126 : tensor<2x16x1xf32>
    %128 = stablehlo.broadcast_in_dim %125, dims = [0, 1, 2] : (tensor<2x16x1xf32>) -> tensor<2x16x32xf32>
    %129 = stablehlo.subtract %111, %128 : tensor<2x16x32xf32>
    %130 = stablehlo.broadcast_in_dim %127, dims = [0, 1, 2] : (tensor<2x16x1xf32>) -> tensor<2x16x32xf32>
    %131 = stablehlo.multiply %129, %130 : tensor<2x16x32xf32>
    %132 = stablehlo.broadcast_in_dim %arg10, dims = [2] : (tensor<32xf32>) -> tensor<2x16x32xf32>
    %133 = stablehlo.multiply %131, %132 : tensor<2x16x32xf32>
    %134 = stablehlo.broadcast_in_dim %arg11, dims = [2] : (tensor<32xf32>) -> tensor<2x16x32xf32>
    %135 = stablehlo.add %133, %134 : tensor<2x16x32xf32>
    %136 = stablehlo.reshape %135 : (tensor<2x16x32xf32>) -> tensor<32x32xf32>
    %137 = stablehlo.transpose %arg12, dims = [1, 0] : (tensor<64x32xf32>) -> tensor<32x64xf32>
    %138 = stablehlo.dot_general %136, %137, contracting_dims = [1] x [0] : (tensor<32x32xf32>, tensor<32x64xf32>) -> tensor<32x64xf32>
    %139 = stablehlo.broadcast_in_dim %45, dims = [] : (tensor<f32>) -> tensor<32x64xf32>
    %140 = stablehlo.multiply %138, %139 : tensor<32x64xf32>
    %141 = stablehlo.broadcast_in_dim %45, dims = [] : (tensor<f32>) -> tensor<64xf32>
    %142 = stablehlo.multiply %arg13, %141 : tensor<64xf32>
    %143 = stablehlo.broadcast_in_dim %142, dims = [1] : (tensor<64xf32>) -> tensor<32x64xf32>
    %144 = stablehlo.add %140, %143 : tensor<32x64xf32>
    %145 = stablehlo.reshape %144 : (tensor<32x64xf32>) -> tensor<2x16x64xf32>
    %146 = stablehlo.multiply %145, %cst_5 : tensor<2x16x64xf32>
    %147 = stablehlo.rsqrt %cst_4 : tensor<2x16x64xf32>
    %148 = stablehlo.multiply %145, %147 : tensor<2x16x64xf32>
    %149 = stablehlo.clamp %cst_6, %148, %cst_7 : tensor<2x16x64xf32>
    %150 = stablehlo.multiply %149, %149 : tensor<2x16x64xf32>
    %151 = stablehlo.multiply %cst_8, %150 : tensor<2x16x64xf32>
    %152 = stablehlo.add %151, %cst_9 : tensor<2x16x64xf32>
    %153 = stablehlo.multiply %152, %150 : tensor<2x16x64xf32>
    %154 = stablehlo.add %153, %cst_10 : tensor<2x16x64xf32>
    %155 = stablehlo.multiply %154, %150 : tensor<2x16x64xf32>
    %156 = stablehlo.add %155, %cst_11 : tensor<2x16x64xf32>
    %157 = stablehlo.multiply %156, %150 : tensor<2x16x64xf32>
    %158 = stablehlo.add %157, %cst_12 : tensor<2x16x64xf32>
    %159 = stablehlo.multiply %158, %150 : tensor<2x16x64xf32>
    %160 = stablehlo.add %159, %cst_13 : tensor<2x16x64xf32>
    %161 = stablehlo.multiply %160, %150 : tensor<2x16x64xf32>
    %162 = stablehlo.add %161, %cst_14 : tensor<2x16x64xf32>
    %163 = stablehlo.multiply %cst_15, %150 : tensor<2x16x64xf32>
    %164 = stablehlo.add %163, %cst_16 : tensor<2x16x64xf32>
    %165 = stablehlo.multiply %164, %150 : tensor<2x16x64xf32>
    %166 = stablehlo.add %165, %cst_17 : tensor<2x16x64xf32>
    %167 = stablehlo.multiply %166, %150 : tensor<2x16x64xf32>
    %168 = stablehlo.add %167, %cst_18 : tensor<2x16x64xf32>
    %169 = stablehlo.multiply %168, %150 : tensor<2x16x64xf32>
    %170 = stablehlo.add %169, %cst_19 : tensor<2x16x64xf32>
    %171 = stablehlo.multiply %149, %162 : tensor<2x16x64xf32>
    %172 = stablehlo.divide %171, %170 : tensor<2x16x64xf32>
    %173 = stablehlo.clamp %cst_20, %172, %cst_3 : tensor<2x16x64xf32>
    %174 = stablehlo.add %173, %cst_3 : tensor<2x16x64xf32>
    %175 = stablehlo.multiply %174, %146 : tensor<2x16x64xf32>
    %176 = stablehlo.reshape %175 : (tensor<2x16x64xf32>) -> tensor<32x64xf32>
    %177 = stablehlo.transpose %arg14, dims = [1, 0] : (tensor<32x64xf32>) -> tensor<64x32xf32>
    %178 = stablehlo.dot_general %176, %177, contracting_dims = [1] x [0] : (tensor<32x64xf32>, tensor<64x32xf32>) -> tensor<32x32xf32>
    %179 = stablehlo.broadcast_in_dim %45, dims = [] : (tensor<f32>) -> tensor<32x32xf32>
    %180 = stablehlo.multiply %178, %179 : tensor<32x32xf32>
    %181 = stablehlo.broadcast_in_dim %45, dims = [] : (tensor<f32>) -> tensor<32xf32>
    %182 = stablehlo.multiply %arg15, %181 : tensor<32xf32>
    %183 = stablehlo.broadcast_in_dim %182, dims = [1] : (tensor<32xf32>) -> tensor<32x32xf32>
    %184 = stablehlo.add %180, %183 : tensor<32x32xf32>
    %185 = stablehlo.reshape %184 : (tensor<32x32xf32>) -> tensor<2x16x32xf32>
    %186 = stablehlo.add %111, %185 : tensor<2x16x32xf32>
    %187 = stablehlo.reduce(%186 init: %cst_1) applies stablehlo.add across dimensions = [1] : (tensor<2x16x32xf32>, tensor<f32>) -> tensor<2x32xf32>
    %188 = stablehlo.convert %cst_26 : (tensor<1xi64>) -> tensor<1xf32>
    %189 = stablehlo.reshape %188 : (tensor<1xf32>) -> tensor<f32>
    %190 = stablehlo.broadcast_in_dim %189, dims = [] : (tensor<f32>) -> tensor<2x32xf32>
    %191 = stablehlo.divide %187, %190 : tensor<2x32xf32>
    %192 = stablehlo.transpose %arg16, dims = [1, 0] : (tensor<10x32xf32>) -> tensor<32x10xf32>
    %193 = stablehlo.dot_general %191, %192, contracting_dims = [1] x [0] : (tensor<2x32xf32>, tensor<32x10xf32>) -> tensor<2x10xf32>
    %194 = stablehlo.broadcast_in_dim %45, dims = [] : (tensor<f32>) -> tensor<2x10xf32>
    %195 = stablehlo.multiply %193, %194 : tensor<2x10xf32>
    %196 = stablehlo.broadcast_in_dim %45, dims = [] : (tensor<f32>) -> tensor<10xf32>
    %197 = stablehlo.multiply %arg17, %196 : tensor<10xf32>
    %198 = stablehlo.broadcast_in_dim %197, dims = [1] : (tensor<10xf32>) -> tensor<2x10xf32>
    %199 = stablehlo.add %195, %198 : tensor<2x10xf32>
    return %199 : tensor<2x10xf32>
  }
}
