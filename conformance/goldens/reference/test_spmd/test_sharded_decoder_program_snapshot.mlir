// summary: @main(tensor<i64>, tensor<2x8xi64>, tensor<64x64xf32>, tensor<32x64xf32>, tensor<2x8xi64>, tensor<64xf32>, tensor<96x64xf32>, tensor<2x2x32x16xf32>, tensor<2x2x32x16xf32>, tensor<64x32xf32>, tensor<64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<4x64xf32>, tensor<2x32x64xf32>, tensor<2x64x32xf32>, tensor<64xf32>, tensor<64x64xf32>) -> (tensor<2x2x32x16xf32>, tensor<2x2x32x16xf32>, tensor<2x8x128xf32>) | ops: arith.constant=11 stablehlo.add=20 stablehlo.all_gather=1 stablehlo.all_reduce=4 stablehlo.and=1 stablehlo.broadcast_in_dim=50 stablehlo.ceil=4 stablehlo.compare=7 stablehlo.concatenate=2 stablehlo.constant=30 stablehlo.convert=32 stablehlo.divide=12 stablehlo.dot_general=11 stablehlo.dynamic_iota=4 stablehlo.exponential=2 stablehlo.floor=1 stablehlo.gather=3 stablehlo.logistic=2 stablehlo.multiply=22 stablehlo.not=2 stablehlo.power=3 stablehlo.reduce=9 stablehlo.reshape=76 stablehlo.return=6 stablehlo.rsqrt=3 stablehlo.scatter=2 stablehlo.select=5 stablehlo.slice=6 stablehlo.subtract=5 stablehlo.transpose=24
// graph 0 of 1
module @spmd_program {
  func.func private @piece_0(%arg0: tensor<i64>, %arg1: tensor<2x8xi64>, %arg2: tensor<64x64xf32>) -> tensor<2x8x64xf32> {
    %c = stablehlo.constant dense<64> : tensor<2x8xi64>
    %c_0 = stablehlo.constant dense<0> : tensor<2x8xi64>
    %c_1 = stablehlo.constant dense<64> : tensor<i64>
    %c_2 = stablehlo.constant dense<0> : tensor<i64>
    %c_3 = stablehlo.constant dense<2> : tensor<i64>
    %0 = stablehlo.divide %arg0, %c_3 : tensor<i64>
    %1 = stablehlo.multiply %0, %c_3 : tensor<i64>
    %2 = stablehlo.subtract %arg0, %1 : tensor<i64>
    %3 = stablehlo.compare LT, %2, %c_2, SIGNED : (tensor<i64>, tensor<i64>) -> tensor<i1>
    %4 = stablehlo.add %2, %c_3 : tensor<i64>
    %5 = stablehlo.broadcast_in_dim %4, dims = [] : (tensor<i64>) -> tensor<i64>
    %6 = stablehlo.broadcast_in_dim %2, dims = [] : (tensor<i64>) -> tensor<i64>
    %7 = stablehlo.select %3, %5, %6 : tensor<i1>, tensor<i64>
    %8 = stablehlo.multiply %7, %c_1 : tensor<i64>
    %9 = stablehlo.broadcast_in_dim %8, dims = [] : (tensor<i64>) -> tensor<2x8xi64>
    %10 = stablehlo.subtract %arg1, %9 : tensor<2x8xi64>
    %11 = stablehlo.compare GE, %10, %c_0, SIGNED : (tensor<2x8xi64>, tensor<2x8xi64>) -> tensor<2x8xi1>
    %12 = stablehlo.compare LT, %10, %c, SIGNED : (tensor<2x8xi64>, tensor<2x8xi64>) -> tensor<2x8xi1>
    %13 = stablehlo.and %11, %12 : tensor<2x8xi1>
    %14 = stablehlo.convert %13 : (tensor<2x8xi1>) -> tensor<2x8xi64>
    %15 = stablehlo.multiply %10, %14 : tensor<2x8xi64>
    %16 = "stablehlo.gather"(%arg2, %15) <{dimension_numbers = #stablehlo.gather<offset_dims = [2], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 2>, indices_are_sorted = false, slice_sizes = array<i64: 1, 64>}> : (tensor<64x64xf32>, tensor<2x8xi64>) -> tensor<2x8x64xf32>
    %17 = stablehlo.convert %16 : tensor<2x8x64xf32>
    %18 = stablehlo.reshape %13 : (tensor<2x8xi1>) -> tensor<2x8x1xi1>
    %19 = stablehlo.convert %18 : (tensor<2x8x1xi1>) -> tensor<2x8x1xf32>
    %20 = stablehlo.broadcast_in_dim %19, dims = [0, 1, 2] : (tensor<2x8x1xf32>) -> tensor<2x8x64xf32>
    %21 = stablehlo.multiply %17, %20 : tensor<2x8x64xf32>
    return %21 : tensor<2x8x64xf32>
  }
  func.func private @piece_1(%arg0: tensor<32x64xf32>, %arg1: tensor<2x8xi64>, %arg2: tensor<2x8x64xf32>, %arg3: tensor<64xf32>, %arg4: tensor<96x64xf32>, %arg5: tensor<2x2x32x16xf32>, %arg6: tensor<2x2x32x16xf32>, %arg7: tensor<64x32xf32>) -> (tensor<2x8x64xf32>, tensor<2x2x32x16xf32>, tensor<2x2x32x16xf32>, tensor<2x8x64xf32>) {
    %c = stablehlo.constant dense<0> : tensor<32xi64>
    %c_0 = stablehlo.constant dense<1> : tensor<32xi64>
    %c_1 = stablehlo.constant dense<32> : tensor<i64>
    %c_2 = stablehlo.constant dense<0> : tensor<2xi64>
    %c_3 = stablehlo.constant dense<1> : tensor<2xi64>
    %c_4 = stablehlo.constant dense<2> : tensor<i64>
    %c_5 = stablehlo.constant dense<0> : tensor<16xi64>
    %c_6 = stablehlo.constant dense<1> : tensor<16xi64>
    %c_7 = stablehlo.constant dense<16> : tensor<i64>
    %c_8 = stablehlo.constant dense<1> : tensor<i64>
    %c_9 = stablehlo.constant dense<32> : tensor<8xi64>
    %c_10 = stablehlo.constant dense<0> : tensor<8xi64>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<2x2x8x32xf32>
    %cst_11 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %cst_12 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %c_13 = stablehlo.constant dense<false> : tensor<i1>
    %cst_14 = arith.constant dense<2> : tensor<1xi64>
    %cst_15 = arith.constant dense<64> : tensor<1xi64>
    %cst_16 = arith.constant dense<9.9999999747524271E-7> : tensor<1xf64>
    %cst_17 = arith.constant dense<5.000000e-01> : tensor<1xf64>
    %cst_18 = arith.constant dense<0xFFF0000000000000> : tensor<1xf64>
    %0 = "stablehlo.gather"(%arg0, %arg1) <{dimension_numbers = #stablehlo.gather<offset_dims = [2], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 2>, indices_are_sorted = false, slice_sizes = array<i64: 1, 64>}> : (tensor<32x64xf32>, tensor<2x8xi64>) -> tensor<2x8x64xf32>
    %1 = stablehlo.convert %0 : tensor<2x8x64xf32>
    %2 = stablehlo.add %arg2, %1 : tensor<2x8x64xf32>
    %3 = stablehlo.convert %cst_14 : (tensor<1xi64>) -> tensor<1xf32>
    %4 = stablehlo.reshape %3 : (tensor<1xf32>) -> tensor<f32>
    %5 = stablehlo.broadcast_in_dim %4, dims = [] : (tensor<f32>) -> tensor<2x8x64xf32>
    %6 = stablehlo.power %2, %5 : tensor<2x8x64xf32>
    %7 = stablehlo.reduce(%6 init: %cst_11) applies stablehlo.add across dimensions = [2] : (tensor<2x8x64xf32>, tensor<f32>) -> tensor<2x8xf32>
    %8 = stablehlo.reshape %7 : (tensor<2x8xf32>) -> tensor<2x8x1xf32>
    %9 = stablehlo.convert %cst_15 : (tensor<1xi64>) -> tensor<1xf32>
    %10 = stablehlo.reshape %9 : (tensor<1xf32>) -> tensor<f32>
    %11 = stablehlo.broadcast_in_dim %10, dims = [] : (tensor<f32>) -> tensor<2x8x1xf32>
    %12 = stablehlo.divide %8, %11 : tensor<2x8x1xf32>
    %13 = stablehlo.convert %cst_16 : (tensor<1xf64>) -> tensor<1xf32>
    %14 = stablehlo.reshape %13 : (tensor<1xf32>) -> tensor<f32>
    %15 = stablehlo.broadcast_in_dim %14, dims = [] : (tensor<f32>) -> tensor<2x8x1xf32>
    %16 = stablehlo.add %12, %15 : tensor<2x8x1xf32>
    %17 = stablehlo.rsqrt %16 : tensor<2x8x1xf32>
    %18 = stablehlo.broadcast_in_dim %17, dims = [0, 1, 2] : (tensor<2x8x1xf32>) -> tensor<2x8x64xf32>
    %19 = stablehlo.multiply %2, %18 : tensor<2x8x64xf32>
    %20 = stablehlo.broadcast_in_dim %arg3, dims = [2] : (tensor<64xf32>) -> tensor<2x8x64xf32>
    %21 = stablehlo.multiply %19, %20 : tensor<2x8x64xf32>
    %22 = stablehlo.transpose %arg4, dims = [1, 0] : (tensor<96x64xf32>) -> tensor<64x96xf32>
    %23 = stablehlo.reshape %21 : (tensor<2x8x64xf32>) -> tensor<16x64xf32>
    %24 = stablehlo.dot_general %23, %22, contracting_dims = [1] x [0] : (tensor<16x64xf32>, tensor<64x96xf32>) -> tensor<16x96xf32>
    %25 = stablehlo.reshape %24 : (tensor<16x96xf32>) -> tensor<2x8x96xf32>
    %26 = stablehlo.slice %25 [0:2, 0:8, 0:32] : (tensor<2x8x96xf32>) -> tensor<2x8x32xf32>
    %27 = stablehlo.slice %25 [0:2, 0:8, 32:64] : (tensor<2x8x96xf32>) -> tensor<2x8x32xf32>
    %28 = stablehlo.slice %25 [0:2, 0:8, 64:96] : (tensor<2x8x96xf32>) -> tensor<2x8x32xf32>
    %29 = stablehlo.reshape %26 : (tensor<2x8x32xf32>) -> tensor<2x8x2x16xf32>
    %30 = stablehlo.transpose %29, dims = [0, 2, 1, 3] : (tensor<2x8x2x16xf32>) -> tensor<2x2x8x16xf32>
    %31 = stablehlo.reshape %27 : (tensor<2x8x32xf32>) -> tensor<2x8x2x16xf32>
    %32 = stablehlo.transpose %31, dims = [0, 2, 1, 3] : (tensor<2x8x2x16xf32>) -> tensor<2x2x8x16xf32>
    %33 = stablehlo.reshape %28 : (tensor<2x8x32xf32>) -> tensor<2x8x2x16xf32>
    %34 = stablehlo.transpose %33, dims = [0, 2, 1, 3] : (tensor<2x8x2x16xf32>) -> tensor<2x2x8x16xf32>
    %35 = stablehlo.slice %arg1 [0:1, 0:8] : (tensor<2x8xi64>) -> tensor<1x8xi64>
    %36 = stablehlo.reshape %35 : (tensor<1x8xi64>) -> tensor<8xi64>
    %37 = stablehlo.compare LT, %36, %c_10, SIGNED : (tensor<8xi64>, tensor<8xi64>) -> tensor<8xi1>
    %38 = stablehlo.add %36, %c_9 : tensor<8xi64>
    %39 = stablehlo.broadcast_in_dim %37, dims = [0] : (tensor<8xi1>) -> tensor<8xi1>
    %40 = stablehlo.broadcast_in_dim %38, dims = [0] : (tensor<8xi64>) -> tensor<8xi64>
    %41 = stablehlo.broadcast_in_dim %36, dims = [0] : (tensor<8xi64>) -> tensor<8xi64>
    %42 = stablehlo.select %39, %40, %41 : tensor<8xi1>, tensor<8xi64>
    %43 = stablehlo.convert %c_8 : (tensor<i64>) -> tensor<f64>
    %44 = stablehlo.convert %c_7 : (tensor<i64>) -> tensor<f64>
    %45 = stablehlo.divide %44, %43 : tensor<f64>
    %46 = stablehlo.ceil %45 : tensor<f64>
    %47 = stablehlo.convert %46 : (tensor<f64>) -> tensor<i64>
    %48 = stablehlo.reshape %47 : (tensor<i64>) -> tensor<1xi64>
    %49 = stablehlo.dynamic_iota %48, dim = 0 : (tensor<1xi64>) -> tensor<16xi64>
    %50 = stablehlo.multiply %49, %c_6 : tensor<16xi64>
    %51 = stablehlo.add %50, %c_5 : tensor<16xi64>
    %52 = stablehlo.reshape %42 : (tensor<8xi64>) -> tensor<8x1xi64>
    %53 = stablehlo.convert %c_4 : (tensor<i64>) -> tensor<f64>
    %54 = stablehlo.divide %53, %43 : tensor<f64>
    %55 = stablehlo.ceil %54 : tensor<f64>
    %56 = stablehlo.convert %55 : (tensor<f64>) -> tensor<i64>
    %57 = stablehlo.reshape %56 : (tensor<i64>) -> tensor<1xi64>
    %58 = stablehlo.dynamic_iota %57, dim = 0 : (tensor<1xi64>) -> tensor<2xi64>
    %59 = stablehlo.multiply %58, %c_3 : tensor<2xi64>
    %60 = stablehlo.add %59, %c_2 : tensor<2xi64>
    %61 = stablehlo.reshape %60 : (tensor<2xi64>) -> tensor<2x1xi64>
    %62 = stablehlo.reshape %61 : (tensor<2x1xi64>) -> tensor<2x1x1xi64>
    %63 = stablehlo.reshape %62 : (tensor<2x1x1xi64>) -> tensor<2x1x1x1xi64>
    %64 = stablehlo.broadcast_in_dim %63, dims = [0, 1, 2, 3] : (tensor<2x1x1x1xi64>) -> tensor<2x2x8x16xi64>
    %65 = stablehlo.reshape %64 : (tensor<2x2x8x16xi64>) -> tensor<2x2x8x16x1xi64>
    %66 = stablehlo.broadcast_in_dim %62, dims = [1, 2, 3] : (tensor<2x1x1xi64>) -> tensor<2x2x8x16xi64>
    %67 = stablehlo.reshape %66 : (tensor<2x2x8x16xi64>) -> tensor<2x2x8x16x1xi64>
    %68 = stablehlo.broadcast_in_dim %52, dims = [2, 3] : (tensor<8x1xi64>) -> tensor<2x2x8x16xi64>
    %69 = stablehlo.reshape %68 : (tensor<2x2x8x16xi64>) -> tensor<2x2x8x16x1xi64>
    %70 = stablehlo.broadcast_in_dim %51, dims = [3] : (tensor<16xi64>) -> tensor<2x2x8x16xi64>
    %71 = stablehlo.reshape %70 : (tensor<2x2x8x16xi64>) -> tensor<2x2x8x16x1xi64>
    %72 = stablehlo.concatenate %65, %67, %69, %71, dim = 4 : (tensor<2x2x8x16x1xi64>, tensor<2x2x8x16x1xi64>, tensor<2x2x8x16x1xi64>, tensor<2x2x8x16x1xi64>) -> tensor<2x2x8x16x4xi64>
    %73 = "stablehlo.scatter"(%arg5, %72, %32) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0, 1, 2, 3], scatter_dims_to_operand_dims = [0, 1, 2, 3], index_vector_dim = 4>, unique_indices = false}> ({
    ^bb0(%arg8: tensor<f32>, %arg9: tensor<f32>):
      stablehlo.return %arg9 : tensor<f32>
    }) : (tensor<2x2x32x16xf32>, tensor<2x2x8x16x4xi64>, tensor<2x2x8x16xf32>) -> tensor<2x2x32x16xf32>
    %74 = "stablehlo.scatter"(%arg6, %72, %34) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0, 1, 2, 3], scatter_dims_to_operand_dims = [0, 1, 2, 3], index_vector_dim = 4>, unique_indices = false}> ({
    ^bb0(%arg8: tensor<f32>, %arg9: tensor<f32>):
      stablehlo.return %arg9 : tensor<f32>
    }) : (tensor<2x2x32x16xf32>, tensor<2x2x8x16x4xi64>, tensor<2x2x8x16xf32>) -> tensor<2x2x32x16xf32>
    %75 = stablehlo.convert %c_1 : (tensor<i64>) -> tensor<f64>
    %76 = stablehlo.divide %75, %43 : tensor<f64>
    %77 = stablehlo.ceil %76 : tensor<f64>
    %78 = stablehlo.convert %77 : (tensor<f64>) -> tensor<i64>
    %79 = stablehlo.reshape %78 : (tensor<i64>) -> tensor<1xi64>
    %80 = stablehlo.dynamic_iota %79, dim = 0 : (tensor<1xi64>) -> tensor<32xi64>
    %81 = stablehlo.multiply %80, %c_0 : tensor<32xi64>
    %82 = stablehlo.add %81, %c : tensor<32xi64>
    %83 = stablehlo.reshape %82 : (tensor<32xi64>) -> tensor<1x1x1x32xi64>
    %84 = stablehlo.reshape %arg1 : (tensor<2x8xi64>) -> tensor<2x1x8x1xi64>
    %85 = stablehlo.broadcast_in_dim %83, dims = [0, 1, 2, 3] : (tensor<1x1x1x32xi64>) -> tensor<2x1x8x32xi64>
    %86 = stablehlo.broadcast_in_dim %84, dims = [0, 1, 2, 3] : (tensor<2x1x8x1xi64>) -> tensor<2x1x8x32xi64>
    %87 = stablehlo.compare LE, %85, %86, SIGNED : (tensor<2x1x8x32xi64>, tensor<2x1x8x32xi64>) -> tensor<2x1x8x32xi1>
    %88 = stablehlo.broadcast_in_dim %87, dims = [0, 1, 2, 3] : (tensor<2x1x8x32xi1>) -> tensor<2x1x8x32xi1>
    %89 = stablehlo.broadcast_in_dim %cst_11, dims = [] : (tensor<f32>) -> tensor<2x1x8x32xf32>
    %90 = stablehlo.broadcast_in_dim %cst_12, dims = [] : (tensor<f32>) -> tensor<2x1x8x32xf32>
    %91 = stablehlo.select %88, %89, %90 : tensor<2x1x8x32xi1>, tensor<2x1x8x32xf32>
    %92 = stablehlo.convert %cst_17 : (tensor<1xf64>) -> tensor<1xf32>
    %93 = stablehlo.reshape %92 : (tensor<1xf32>) -> tensor<f32>
    %94 = stablehlo.broadcast_in_dim %93, dims = [] : (tensor<f32>) -> tensor<2x2x8x16xf32>
    %95 = stablehlo.multiply %30, %94 : tensor<2x2x8x16xf32>
    %96 = stablehlo.transpose %73, dims = [0, 1, 3, 2] : (tensor<2x2x32x16xf32>) -> tensor<2x2x16x32xf32>
    %97 = stablehlo.broadcast_in_dim %93, dims = [] : (tensor<f32>) -> tensor<2x2x16x32xf32>
    %98 = stablehlo.multiply %96, %97 : tensor<2x2x16x32xf32>
    %99 = stablehlo.reshape %95 : (tensor<2x2x8x16xf32>) -> tensor<4x8x16xf32>
    %100 = stablehlo.reshape %98 : (tensor<2x2x16x32xf32>) -> tensor<4x16x32xf32>
    %101 = stablehlo.broadcast_in_dim %100, dims = [0, 1, 2] : (tensor<4x16x32xf32>) -> tensor<4x16x32xf32>
    %102 = stablehlo.dot_general %99, %101, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<4x8x16xf32>, tensor<4x16x32xf32>) -> tensor<4x8x32xf32>
    %103 = stablehlo.reshape %102 : (tensor<4x8x32xf32>) -> tensor<2x2x8x32xf32>
    %104 = stablehlo.broadcast_in_dim %91, dims = [0, 1, 2, 3] : (tensor<2x1x8x32xf32>) -> tensor<2x2x8x32xf32>
    %105 = stablehlo.add %103, %104 : tensor<2x2x8x32xf32>
    %106 = stablehlo.reduce(%105 init: %cst_12) applies stablehlo.maximum across dimensions = [3] : (tensor<2x2x8x32xf32>, tensor<f32>) -> tensor<2x2x8xf32>
    %107 = stablehlo.reshape %106 : (tensor<2x2x8xf32>) -> tensor<2x2x8x1xf32>
    %108 = stablehlo.broadcast_in_dim %107, dims = [0, 1, 2, 3] : (tensor<2x2x8x1xf32>) -> tensor<2x2x8x32xf32>
    %109 = stablehlo.subtract %105, %108 : tensor<2x2x8x32xf32>
    %110 = stablehlo.exponential %109 : tensor<2x2x8x32xf32>
    %111 = stablehlo.reduce(%110 init: %cst_11) applies stablehlo.add across dimensions = [3] : (tensor<2x2x8x32xf32>, tensor<f32>) -> tensor<2x2x8xf32>
    %112 = stablehlo.reshape %111 : (tensor<2x2x8xf32>) -> tensor<2x2x8x1xf32>
    %113 = stablehlo.broadcast_in_dim %112, dims = [0, 1, 2, 3] : (tensor<2x2x8x1xf32>) -> tensor<2x2x8x32xf32>
    %114 = stablehlo.divide %110, %113 : tensor<2x2x8x32xf32>
    %115 = stablehlo.convert %cst_18 : tensor<1xf64>
    %116 = stablehlo.reshape %115 : (tensor<1xf64>) -> tensor<f64>
    %117 = stablehlo.convert %116 : (tensor<f64>) -> tensor<f32>
    %118 = stablehlo.broadcast_in_dim %117, dims = [] : (tensor<f32>) -> tensor<2x2x8x32xf32>
    %119 = stablehlo.compare EQ, %105, %118, FLOAT : (tensor<2x2x8x32xf32>, tensor<2x2x8x32xf32>) -> tensor<2x2x8x32xi1>
    %120 = stablehlo.not %119 : tensor<2x2x8x32xi1>
    %121 = stablehlo.reduce(%120 init: %c_13) applies stablehlo.or across dimensions = [3] : (tensor<2x2x8x32xi1>, tensor<i1>) -> tensor<2x2x8xi1>
    %122 = stablehlo.reshape %121 : (tensor<2x2x8xi1>) -> tensor<2x2x8x1xi1>
    %123 = stablehlo.not %122 : tensor<2x2x8x1xi1>
    %124 = stablehlo.broadcast_in_dim %123, dims = [0, 1, 2, 3] : (tensor<2x2x8x1xi1>) -> tensor<2x2x8x32xi1>
    %125 = stablehlo.broadcast_in_dim %cst, dims = [0, 1, 2, 3] : (tensor<2x2x8x32xf32>) -> tensor<2x2x8x32xf32>
    %126 = stablehlo.broadcast_in_dim %114, dims = [0, 1, 2, 3] : (tensor<2x2x8x32xf32>) -> tensor<2x2x8x32xf32>
    %127 = stablehlo.select %124, %125, %126 : tensor<2x2x8x32xi1>, tensor<2x2x8x32xf32>
    %128 = stablehlo.reshape %127 : (tensor<2x2x8x32xf32>) -> tensor<4x8x32xf32>
    %129 = stablehlo.reshape %74 : (tensor<2x2x32x16xf32>) -> tensor<4x32x16xf32>
    %130 = stablehlo.broadcast_in_dim %129, dims = [0, 1, 2] : (tensor<4x32x16xf32>) -> tensor<4x32x16xf32>
    %131 = stablehlo.dot_general %128, %130, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<4x8x32xf32>, tensor<4x32x16xf32>) -> tensor<4x8x16xf32>
    %132 = stablehlo.reshape %131 : (tensor<4x8x16xf32>) -> tensor<2x2x8x16xf32>
    %133 = stablehlo.transpose %132, dims = [2, 0, 1, 3] : (tensor<2x2x8x16xf32>) -> tensor<8x2x2x16xf32>
    %134 = stablehlo.transpose %133, dims = [1, 2, 0, 3] : (tensor<8x2x2x16xf32>) -> tensor<2x2x8x16xf32>
    %135 = stablehlo.transpose %134, dims = [0, 2, 1, 3] : (tensor<2x2x8x16xf32>) -> tensor<2x8x2x16xf32>
    %136 = stablehlo.reshape %135 : (tensor<2x8x2x16xf32>) -> tensor<2x8x32xf32>
    %137 = stablehlo.transpose %arg7, dims = [1, 0] : (tensor<64x32xf32>) -> tensor<32x64xf32>
    %138 = stablehlo.reshape %136 : (tensor<2x8x32xf32>) -> tensor<16x32xf32>
    %139 = stablehlo.dot_general %138, %137, contracting_dims = [1] x [0] : (tensor<16x32xf32>, tensor<32x64xf32>) -> tensor<16x64xf32>
    %140 = stablehlo.reshape %139 : (tensor<16x64xf32>) -> tensor<2x8x64xf32>
    return %2, %73, %74, %140 : tensor<2x8x64xf32>, tensor<2x2x32x16xf32>, tensor<2x2x32x16xf32>, tensor<2x8x64xf32>
  }
  func.func private @piece_2(%arg0: tensor<2x8x64xf32>, %arg1: tensor<2x8x64xf32>, %arg2: tensor<64xf32>, %arg3: tensor<64x64xf32>, %arg4: tensor<64x64xf32>, %arg5: tensor<64x64xf32>) -> (tensor<2x8x64xf32>, tensor<2x8x64xf32>) {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %cst_0 = arith.constant dense<2> : tensor<1xi64>
    %cst_1 = arith.constant dense<64> : tensor<1xi64>
    %cst_2 = arith.constant dense<9.9999999747524271E-7> : tensor<1xf64>
    %0 = stablehlo.add %arg0, %arg1 : tensor<2x8x64xf32>
    %1 = stablehlo.convert %cst_0 : (tensor<1xi64>) -> tensor<1xf32>
    %2 = stablehlo.reshape %1 : (tensor<1xf32>) -> tensor<f32>
    %3 = stablehlo.broadcast_in_dim %2, dims = [] : (tensor<f32>) -> tensor<2x8x64xf32>
    %4 = stablehlo.power %0, %3 : tensor<2x8x64xf32>
    %5 = stablehlo.reduce(%4 init: %cst) applies stablehlo.add across dimensions = [2] : (tensor<2x8x64xf32>, tensor<f32>) -> tensor<2x8xf32>
    %6 = stablehlo.reshape %5 : (tensor<2x8xf32>) -> tensor<2x8x1xf32>
    %7 = stablehlo.convert %cst_1 : (tensor<1xi64>) -> tensor<1xf32>
    %8 = stablehlo.reshape %7 : (tensor<1xf32>) -> tensor<f32>
    %9 = stablehlo.broadcast_in_dim %8, dims = [] : (tensor<f32>) -> tensor<2x8x1xf32>
    %10 = stablehlo.divide %6, %9 : tensor<2x8x1xf32>
    %11 = stablehlo.convert %cst_2 : (tensor<1xf64>) -> tensor<1xf32>
    %12 = stablehlo.reshape %11 : (tensor<1xf32>) -> tensor<f32>
    %13 = stablehlo.broadcast_in_dim %12, dims = [] : (tensor<f32>) -> tensor<2x8x1xf32>
    %14 = stablehlo.add %10, %13 : tensor<2x8x1xf32>
    %15 = stablehlo.rsqrt %14 : tensor<2x8x1xf32>
    %16 = stablehlo.broadcast_in_dim %15, dims = [0, 1, 2] : (tensor<2x8x1xf32>) -> tensor<2x8x64xf32>
    %17 = stablehlo.multiply %0, %16 : tensor<2x8x64xf32>
    %18 = stablehlo.broadcast_in_dim %arg2, dims = [2] : (tensor<64xf32>) -> tensor<2x8x64xf32>
    %19 = stablehlo.multiply %17, %18 : tensor<2x8x64xf32>
    %20 = stablehlo.transpose %arg3, dims = [1, 0] : (tensor<64x64xf32>) -> tensor<64x64xf32>
    %21 = stablehlo.reshape %19 : (tensor<2x8x64xf32>) -> tensor<16x64xf32>
    %22 = stablehlo.dot_general %21, %20, contracting_dims = [1] x [0] : (tensor<16x64xf32>, tensor<64x64xf32>) -> tensor<16x64xf32>
    %23 = stablehlo.reshape %22 : (tensor<16x64xf32>) -> tensor<2x8x64xf32>
    %24 = stablehlo.logistic %23 : tensor<2x8x64xf32>
    %25 = stablehlo.multiply %23, %24 : tensor<2x8x64xf32>
    %26 = stablehlo.transpose %arg4, dims = [1, 0] : (tensor<64x64xf32>) -> tensor<64x64xf32>
    %27 = stablehlo.dot_general %21, %26, contracting_dims = [1] x [0] : (tensor<16x64xf32>, tensor<64x64xf32>) -> tensor<16x64xf32>
    %28 = stablehlo.reshape %27 : (tensor<16x64xf32>) -> tensor<2x8x64xf32>
    %29 = stablehlo.multiply %25, %28 : tensor<2x8x64xf32>
    %30 = stablehlo.transpose %arg5, dims = [1, 0] : (tensor<64x64xf32>) -> tensor<64x64xf32>
    %31 = stablehlo.reshape %29 : (tensor<2x8x64xf32>) -> tensor<16x64xf32>
    %32 = stablehlo.dot_general %31, %30, contracting_dims = [1] x [0] : (tensor<16x64xf32>, tensor<64x64xf32>) -> tensor<16x64xf32>
    %33 = stablehlo.reshape %32 : (tensor<16x64xf32>) -> tensor<2x8x64xf32>
    return %0, %33 : tensor<2x8x64xf32>, tensor<2x8x64xf32>
  }
  func.func private @piece_3(%arg0: tensor<2x8x64xf32>, %arg1: tensor<2x8x64xf32>, %arg2: tensor<4x64xf32>, %arg3: tensor<i64>, %arg4: tensor<2x32x64xf32>, %arg5: tensor<2x64x32xf32>) -> (tensor<2x8x64xf32>, tensor<2x8x64xf32>) {
    %c = stablehlo.constant dense<0> : tensor<2xi64>
    %c_0 = stablehlo.constant dense<1> : tensor<2xi64>
    %c_1 = stablehlo.constant dense<0> : tensor<i64>
    %c_2 = stablehlo.constant dense<1> : tensor<i64>
    %c_3 = stablehlo.constant dense<2> : tensor<i64>
    %cst = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %cst_4 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.add %arg0, %arg1 : tensor<2x8x64xf32>
    %1 = stablehlo.transpose %arg2, dims = [1, 0] : (tensor<4x64xf32>) -> tensor<64x4xf32>
    %2 = stablehlo.reshape %0 : (tensor<2x8x64xf32>) -> tensor<16x64xf32>
    %3 = stablehlo.dot_general %2, %1, contracting_dims = [1] x [0] : (tensor<16x64xf32>, tensor<64x4xf32>) -> tensor<16x4xf32>
    %4 = stablehlo.reshape %3 : (tensor<16x4xf32>) -> tensor<2x8x4xf32>
    %5 = stablehlo.reduce(%4 init: %cst) applies stablehlo.maximum across dimensions = [2] : (tensor<2x8x4xf32>, tensor<f32>) -> tensor<2x8xf32>
    %6 = stablehlo.reshape %5 : (tensor<2x8xf32>) -> tensor<2x8x1xf32>
    %7 = stablehlo.broadcast_in_dim %6, dims = [0, 1, 2] : (tensor<2x8x1xf32>) -> tensor<2x8x4xf32>
    %8 = stablehlo.subtract %4, %7 : tensor<2x8x4xf32>
    %9 = stablehlo.exponential %8 : tensor<2x8x4xf32>
    %10 = stablehlo.reduce(%9 init: %cst_4) applies stablehlo.add across dimensions = [2] : (tensor<2x8x4xf32>, tensor<f32>) -> tensor<2x8xf32>
    %11 = stablehlo.reshape %10 : (tensor<2x8xf32>) -> tensor<2x8x1xf32>
    %12 = stablehlo.broadcast_in_dim %11, dims = [0, 1, 2] : (tensor<2x8x1xf32>) -> tensor<2x8x4xf32>
    %13 = stablehlo.divide %9, %12 : tensor<2x8x4xf32>
    %14 = stablehlo.divide %arg3, %c_3 : tensor<i64>
    %15 = stablehlo.multiply %14, %c_3 : tensor<i64>
    %16 = stablehlo.subtract %arg3, %15 : tensor<i64>
    %17 = stablehlo.compare LT, %16, %c_1, SIGNED : (tensor<i64>, tensor<i64>) -> tensor<i1>
    %18 = stablehlo.add %16, %c_3 : tensor<i64>
    %19 = stablehlo.broadcast_in_dim %18, dims = [] : (tensor<i64>) -> tensor<i64>
    %20 = stablehlo.broadcast_in_dim %16, dims = [] : (tensor<i64>) -> tensor<i64>
    %21 = stablehlo.select %17, %19, %20 : tensor<i1>, tensor<i64>
    %22 = stablehlo.convert %21 : (tensor<i64>) -> tensor<f64>
    %23 = stablehlo.convert %c_2 : (tensor<i64>) -> tensor<f64>
    %24 = stablehlo.divide %22, %23 : tensor<f64>
    %25 = stablehlo.floor %24 : tensor<f64>
    %26 = stablehlo.convert %25 : (tensor<f64>) -> tensor<i64>
    %27 = stablehlo.reshape %26 : (tensor<i64>) -> tensor<1x1xi64>
    %28 = stablehlo.convert %27 : (tensor<1x1xi64>) -> tensor<1x1xi32>
    %29 = stablehlo.convert %c_2 : (tensor<i64>) -> tensor<f64>
    %30 = stablehlo.convert %c_3 : (tensor<i64>) -> tensor<f64>
    %31 = stablehlo.divide %30, %29 : tensor<f64>
    %32 = stablehlo.ceil %31 : tensor<f64>
    %33 = stablehlo.convert %32 : (tensor<f64>) -> tensor<i64>
    %34 = stablehlo.reshape %33 : (tensor<i64>) -> tensor<1xi64>
    %35 = stablehlo.dynamic_iota %34, dim = 0 : (tensor<1xi64>) -> tensor<2xi64>
    %36 = stablehlo.multiply %35, %c_0 : tensor<2xi64>
    %37 = stablehlo.add %36, %c : tensor<2xi64>
    %38 = stablehlo.reshape %28 : (tensor<1x1xi32>) -> tensor<i32>
    %39 = stablehlo.convert %38 : (tensor<i32>) -> tensor<i64>
    %40 = stablehlo.multiply %39, %c_3 : tensor<i64>
    %41 = stablehlo.broadcast_in_dim %40, dims = [] : (tensor<i64>) -> tensor<2xi64>
    %42 = stablehlo.add %37, %41 : tensor<2xi64>
    %43 = "stablehlo.gather"(%13, %42) <{dimension_numbers = #stablehlo.gather<offset_dims = [0, 1], collapsed_slice_dims = [2], start_index_map = [2], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 2, 8, 1>}> : (tensor<2x8x4xf32>, tensor<2xi64>) -> tensor<2x8x2xf32>
    %44 = stablehlo.convert %43 : tensor<2x8x2xf32>
    %45 = stablehlo.reshape %0 : (tensor<2x8x64xf32>) -> tensor<2x8x64x1xf32>
    %46 = stablehlo.reshape %45 : (tensor<2x8x64x1xf32>) -> tensor<2x8x64x1x1xf32>
    %47 = stablehlo.transpose %46, dims = [0, 1, 3, 4, 2] : (tensor<2x8x64x1x1xf32>) -> tensor<2x8x1x1x64xf32>
    %48 = stablehlo.reshape %arg4 : (tensor<2x32x64xf32>) -> tensor<2x32x64x1xf32>
    %49 = stablehlo.reshape %48 : (tensor<2x32x64x1xf32>) -> tensor<2x32x64x1x1xf32>
    %50 = stablehlo.transpose %49, dims = [3, 4, 0, 1, 2] : (tensor<2x32x64x1x1xf32>) -> tensor<1x1x2x32x64xf32>
    %51 = stablehlo.transpose %47, dims = [0, 1, 4, 2, 3] : (tensor<2x8x1x1x64xf32>) -> tensor<2x8x64x1x1xf32>
    %52 = stablehlo.reshape %51 : (tensor<2x8x64x1x1xf32>) -> tensor<1x16x64xf32>
    %53 = stablehlo.transpose %50, dims = [4, 2, 3, 0, 1] : (tensor<1x1x2x32x64xf32>) -> tensor<64x2x32x1x1xf32>
    %54 = stablehlo.reshape %53 : (tensor<64x2x32x1x1xf32>) -> tensor<1x64x64xf32>
    %55 = stablehlo.broadcast_in_dim %54, dims = [0, 1, 2] : (tensor<1x64x64xf32>) -> tensor<1x64x64xf32>
    %56 = stablehlo.dot_general %52, %55, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<1x16x64xf32>, tensor<1x64x64xf32>) -> tensor<1x16x64xf32>
    %57 = stablehlo.reshape %56 : (tensor<1x16x64xf32>) -> tensor<2x8x1x2x32xf32>
    %58 = stablehlo.transpose %57, dims = [0, 1, 3, 4, 2] : (tensor<2x8x1x2x32xf32>) -> tensor<2x8x2x32x1xf32>
    %59 = stablehlo.reshape %58 : (tensor<2x8x2x32x1xf32>) -> tensor<2x8x2x32xf32>
    %60 = stablehlo.logistic %59 : tensor<2x8x2x32xf32>
    %61 = stablehlo.multiply %59, %60 : tensor<2x8x2x32xf32>
    %62 = stablehlo.reshape %61 : (tensor<2x8x2x32xf32>) -> tensor<2x8x2x32x1xf32>
    %63 = stablehlo.transpose %62, dims = [0, 1, 2, 4, 3] : (tensor<2x8x2x32x1xf32>) -> tensor<2x8x2x1x32xf32>
    %64 = stablehlo.reshape %arg5 : (tensor<2x64x32xf32>) -> tensor<2x64x32x1xf32>
    %65 = stablehlo.reshape %64 : (tensor<2x64x32x1xf32>) -> tensor<2x64x32x1x1xf32>
    %66 = stablehlo.transpose %65, dims = [3, 4, 0, 1, 2] : (tensor<2x64x32x1x1xf32>) -> tensor<1x1x2x64x32xf32>
    %67 = stablehlo.transpose %63, dims = [2, 0, 1, 4, 3] : (tensor<2x8x2x1x32xf32>) -> tensor<2x2x8x32x1xf32>
    %68 = stablehlo.reshape %67 : (tensor<2x2x8x32x1xf32>) -> tensor<2x16x32xf32>
    %69 = stablehlo.transpose %66, dims = [2, 4, 3, 0, 1] : (tensor<1x1x2x64x32xf32>) -> tensor<2x32x64x1x1xf32>
    %70 = stablehlo.reshape %69 : (tensor<2x32x64x1x1xf32>) -> tensor<2x32x64xf32>
    %71 = stablehlo.broadcast_in_dim %70, dims = [0, 1, 2] : (tensor<2x32x64xf32>) -> tensor<2x32x64xf32>
    %72 = stablehlo.dot_general %68, %71, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<2x16x32xf32>, tensor<2x32x64xf32>) -> tensor<2x16x64xf32>
    %73 = stablehlo.reshape %72 : (tensor<2x16x64xf32>) -> tensor<2x2x8x1x64xf32>
    %74 = stablehlo.transpose %73, dims = [1, 2, 0, 4, 3] : (tensor<2x2x8x1x64xf32>) -> tensor<2x8x2x64x1xf32>
    %75 = stablehlo.reshape %74 : (tensor<2x8x2x64x1xf32>) -> tensor<2x8x2x64xf32>
    %76 = stablehlo.reshape %44 : (tensor<2x8x2xf32>) -> tensor<2x8x2x1xf32>
    %77 = stablehlo.broadcast_in_dim %76, dims = [0, 1, 2, 3] : (tensor<2x8x2x1xf32>) -> tensor<2x8x2x64xf32>
    %78 = stablehlo.multiply %75, %77 : tensor<2x8x2x64xf32>
    %79 = stablehlo.reduce(%78 init: %cst_4) applies stablehlo.add across dimensions = [2] : (tensor<2x8x2x64xf32>, tensor<f32>) -> tensor<2x8x64xf32>
    return %0, %79 : tensor<2x8x64xf32>, tensor<2x8x64xf32>
  }
  func.func private @piece_4(%arg0: tensor<2x8x64xf32>, %arg1: tensor<2x8x64xf32>, %arg2: tensor<64xf32>, %arg3: tensor<64x64xf32>) -> tensor<2x8x64xf32> {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %cst_0 = arith.constant dense<2> : tensor<1xi64>
    %cst_1 = arith.constant dense<64> : tensor<1xi64>
    %cst_2 = arith.constant dense<9.9999999747524271E-7> : tensor<1xf64>
    %0 = stablehlo.add %arg0, %arg1 : tensor<2x8x64xf32>
    %1 = stablehlo.convert %cst_0 : (tensor<1xi64>) -> tensor<1xf32>
    %2 = stablehlo.reshape %1 : (tensor<1xf32>) -> tensor<f32>
    %3 = stablehlo.broadcast_in_dim %2, dims = [] : (tensor<f32>) -> tensor<2x8x64xf32>
    %4 = stablehlo.power %0, %3 : tensor<2x8x64xf32>
    %5 = stablehlo.reduce(%4 init: %cst) applies stablehlo.add across dimensions = [2] : (tensor<2x8x64xf32>, tensor<f32>) -> tensor<2x8xf32>
    %6 = stablehlo.reshape %5 : (tensor<2x8xf32>) -> tensor<2x8x1xf32>
    %7 = stablehlo.convert %cst_1 : (tensor<1xi64>) -> tensor<1xf32>
    %8 = stablehlo.reshape %7 : (tensor<1xf32>) -> tensor<f32>
    %9 = stablehlo.broadcast_in_dim %8, dims = [] : (tensor<f32>) -> tensor<2x8x1xf32>
    %10 = stablehlo.divide %6, %9 : tensor<2x8x1xf32>
    %11 = stablehlo.convert %cst_2 : (tensor<1xf64>) -> tensor<1xf32>
    %12 = stablehlo.reshape %11 : (tensor<1xf32>) -> tensor<f32>
    %13 = stablehlo.broadcast_in_dim %12, dims = [] : (tensor<f32>) -> tensor<2x8x1xf32>
    %14 = stablehlo.add %10, %13 : tensor<2x8x1xf32>
    %15 = stablehlo.rsqrt %14 : tensor<2x8x1xf32>
    %16 = stablehlo.broadcast_in_dim %15, dims = [0, 1, 2] : (tensor<2x8x1xf32>) -> tensor<2x8x64xf32>
    %17 = stablehlo.multiply %0, %16 : tensor<2x8x64xf32>
    %18 = stablehlo.broadcast_in_dim %arg2, dims = [2] : (tensor<64xf32>) -> tensor<2x8x64xf32>
    %19 = stablehlo.multiply %17, %18 : tensor<2x8x64xf32>
    %20 = stablehlo.transpose %arg3, dims = [1, 0] : (tensor<64x64xf32>) -> tensor<64x64xf32>
    %21 = stablehlo.reshape %19 : (tensor<2x8x64xf32>) -> tensor<16x64xf32>
    %22 = stablehlo.dot_general %21, %20, contracting_dims = [1] x [0] : (tensor<16x64xf32>, tensor<64x64xf32>) -> tensor<16x64xf32>
    %23 = stablehlo.reshape %22 : (tensor<16x64xf32>) -> tensor<2x8x64xf32>
    return %23 : tensor<2x8x64xf32>
  }
  func.func private @piece_5(%arg0: tensor<4x8x64xf32>, %arg1: tensor<2x2x32x16xf32>, %arg2: tensor<2x2x32x16xf32>, %arg3: tensor<2x2x32x16xf32>, %arg4: tensor<2x2x32x16xf32>) -> (tensor<2x8x128xf32>, tensor<2x2x32x16xf32>, tensor<2x2x32x16xf32>) {
    %0 = stablehlo.slice %arg0 [0:2, 0:8, 0:64] : (tensor<4x8x64xf32>) -> tensor<2x8x64xf32>
    %1 = stablehlo.slice %arg0 [2:4, 0:8, 0:64] : (tensor<4x8x64xf32>) -> tensor<2x8x64xf32>
    %2 = stablehlo.concatenate %0, %1, dim = 2 : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x128xf32>
    return %2, %arg2, %arg4 : tensor<2x8x128xf32>, tensor<2x2x32x16xf32>, tensor<2x2x32x16xf32>
  }
  func.func @main(%arg0: tensor<i64>, %arg1: tensor<2x8xi64>, %arg2: tensor<64x64xf32>, %arg3: tensor<32x64xf32>, %arg4: tensor<2x8xi64>, %arg5: tensor<64xf32>, %arg6: tensor<96x64xf32>, %arg7: tensor<2x2x32x16xf32>, %arg8: tensor<2x2x32x16xf32>, %arg9: tensor<64x32xf32>, %arg10: tensor<64xf32>, %arg11: tensor<64x64xf32>, %arg12: tensor<64x64xf32>, %arg13: tensor<64x64xf32>, %arg14: tensor<4x64xf32>, %arg15: tensor<2x32x64xf32>, %arg16: tensor<2x64x32xf32>, %arg17: tensor<64xf32>, %arg18: tensor<64x64xf32>) -> (tensor<2x2x32x16xf32>, tensor<2x2x32x16xf32>, tensor<2x8x128xf32>) {
    %0 = call @piece_0(%arg0, %arg1, %arg2) : (tensor<i64>, tensor<2x8xi64>, tensor<64x64xf32>) -> tensor<2x8x64xf32>
    %1 = "stablehlo.all_reduce"(%0) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>, use_global_device_ids}> ({
    ^bb0(%arg19: tensor<f32>, %arg20: tensor<f32>):
      %11 = stablehlo.add %arg19, %arg20 : tensor<f32>
      stablehlo.return %11 : tensor<f32>
    }) : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
    %2:4 = call @piece_1(%arg3, %arg4, %1, %arg5, %arg6, %arg7, %arg8, %arg9) : (tensor<32x64xf32>, tensor<2x8xi64>, tensor<2x8x64xf32>, tensor<64xf32>, tensor<96x64xf32>, tensor<2x2x32x16xf32>, tensor<2x2x32x16xf32>, tensor<64x32xf32>) -> (tensor<2x8x64xf32>, tensor<2x2x32x16xf32>, tensor<2x2x32x16xf32>, tensor<2x8x64xf32>)
    %3 = "stablehlo.all_reduce"(%2#3) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>, use_global_device_ids}> ({
    ^bb0(%arg19: tensor<f32>, %arg20: tensor<f32>):
      %11 = stablehlo.add %arg19, %arg20 : tensor<f32>
      stablehlo.return %11 : tensor<f32>
    }) : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
    %4:2 = call @piece_2(%2#0, %3, %arg10, %arg11, %arg12, %arg13) : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>) -> (tensor<2x8x64xf32>, tensor<2x8x64xf32>)
    %5 = "stablehlo.all_reduce"(%4#1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>, use_global_device_ids}> ({
    ^bb0(%arg19: tensor<f32>, %arg20: tensor<f32>):
      %11 = stablehlo.add %arg19, %arg20 : tensor<f32>
      stablehlo.return %11 : tensor<f32>
    }) : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
    %6:2 = call @piece_3(%4#0, %5, %arg14, %arg0, %arg15, %arg16) : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<4x64xf32>, tensor<i64>, tensor<2x32x64xf32>, tensor<2x64x32xf32>) -> (tensor<2x8x64xf32>, tensor<2x8x64xf32>)
    %7 = "stablehlo.all_reduce"(%6#1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>, use_global_device_ids}> ({
    ^bb0(%arg19: tensor<f32>, %arg20: tensor<f32>):
      %11 = stablehlo.add %arg19, %arg20 : tensor<f32>
      stablehlo.return %11 : tensor<f32>
    }) : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
    %8 = call @piece_4(%6#0, %7, %arg17, %arg18) : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64xf32>, tensor<64x64xf32>) -> tensor<2x8x64xf32>
    %9 = "stablehlo.all_gather"(%8) <{all_gather_dim = 0 : i64, channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>, use_global_device_ids}> : (tensor<2x8x64xf32>) -> tensor<4x8x64xf32>
    %10:3 = call @piece_5(%9, %arg7, %2#1, %arg8, %2#2) : (tensor<4x8x64xf32>, tensor<2x2x32x16xf32>, tensor<2x2x32x16xf32>, tensor<2x2x32x16xf32>, tensor<2x2x32x16xf32>) -> (tensor<2x8x128xf32>, tensor<2x2x32x16xf32>, tensor<2x2x32x16xf32>)
    return %10#1, %10#2, %10#0 : tensor<2x2x32x16xf32>, tensor<2x2x32x16xf32>, tensor<2x8x128xf32>
  }
}
