// summary: @main(tensor<128x64xf32>, tensor<2x1xi64>, tensor<32x64xf32>, tensor<2x1xi64>, tensor<64xf32>, tensor<192x64xf32>, tensor<2x4x32x16xf32>, tensor<2x4x32x16xf32>, tensor<64x64xf32>, tensor<64xf32>, tensor<128x64xf32>, tensor<128x64xf32>, tensor<64x128xf32>, tensor<64xf32>, tensor<192x64xf32>, tensor<2x4x32x16xf32>, tensor<2x4x32x16xf32>, tensor<64x64xf32>, tensor<64xf32>, tensor<128x64xf32>, tensor<128x64xf32>, tensor<64x128xf32>, tensor<64xf32>, tensor<128x64xf32>) -> (tensor<2x4x32x16xf32>, tensor<2x4x32x16xf32>, tensor<2x4x32x16xf32>, tensor<2x4x32x16xf32>, tensor<2x1x128xf32>) | ops: arith.constant=5 stablehlo.add=16 stablehlo.broadcast_in_dim=39 stablehlo.ceil=4 stablehlo.compare=3 stablehlo.concatenate=1 stablehlo.constant=17 stablehlo.convert=17 stablehlo.divide=11 stablehlo.dot_general=15 stablehlo.dynamic_iota=4 stablehlo.exponential=2 stablehlo.gather=2 stablehlo.logistic=2 stablehlo.multiply=22 stablehlo.not=4 stablehlo.power=5 stablehlo.reduce=11 stablehlo.reshape=73 stablehlo.return=4 stablehlo.rsqrt=5 stablehlo.scatter=4 stablehlo.select=3 stablehlo.slice=7 stablehlo.subtract=2 stablehlo.transpose=25
// graph 0 of 1
module {
  func.func @main(%arg0: tensor<128x64xf32>, %arg1: tensor<2x1xi64>, %arg2: tensor<32x64xf32>, %arg3: tensor<2x1xi64>, %arg4: tensor<64xf32>, %arg5: tensor<192x64xf32>, %arg6: tensor<2x4x32x16xf32>, %arg7: tensor<2x4x32x16xf32>, %arg8: tensor<64x64xf32>, %arg9: tensor<64xf32>, %arg10: tensor<128x64xf32>, %arg11: tensor<128x64xf32>, %arg12: tensor<64x128xf32>, %arg13: tensor<64xf32>, %arg14: tensor<192x64xf32>, %arg15: tensor<2x4x32x16xf32>, %arg16: tensor<2x4x32x16xf32>, %arg17: tensor<64x64xf32>, %arg18: tensor<64xf32>, %arg19: tensor<128x64xf32>, %arg20: tensor<128x64xf32>, %arg21: tensor<64x128xf32>, %arg22: tensor<64xf32>, %arg23: tensor<128x64xf32>) -> (tensor<2x4x32x16xf32>, tensor<2x4x32x16xf32>, tensor<2x4x32x16xf32>, tensor<2x4x32x16xf32>, tensor<2x1x128xf32>) {
    %c = stablehlo.constant dense<0> : tensor<32xi64>
    %c_0 = stablehlo.constant dense<1> : tensor<32xi64>
    %c_1 = stablehlo.constant dense<32> : tensor<i64>
    %c_2 = stablehlo.constant dense<0> : tensor<2xi64>
    %c_3 = stablehlo.constant dense<1> : tensor<2xi64>
    %c_4 = stablehlo.constant dense<2> : tensor<i64>
    %c_5 = stablehlo.constant dense<0> : tensor<4xi64>
    %c_6 = stablehlo.constant dense<1> : tensor<4xi64>
    %c_7 = stablehlo.constant dense<4> : tensor<i64>
    %c_8 = stablehlo.constant dense<0> : tensor<16xi64>
    %c_9 = stablehlo.constant dense<1> : tensor<16xi64>
    %c_10 = stablehlo.constant dense<16> : tensor<i64>
    %c_11 = stablehlo.constant dense<1> : tensor<i64>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<2x4x1x32xf32>
    %cst_12 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %cst_13 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %c_14 = stablehlo.constant dense<false> : tensor<i1>
    %cst_15 = arith.constant dense<2> : tensor<1xi64>
    %cst_16 = arith.constant dense<64> : tensor<1xi64>
    %cst_17 = arith.constant dense<9.9999999999999995E-7> : tensor<1xf64>
    %cst_18 = arith.constant dense<5.000000e-01> : tensor<1xf64>
    %cst_19 = arith.constant dense<0xFFF0000000000000> : tensor<1xf64>
    %0 = "stablehlo.gather"(%arg0, %arg1) <{dimension_numbers = #stablehlo.gather<offset_dims = [2], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 2>, indices_are_sorted = false, slice_sizes = array<i64: 1, 64>}> : (tensor<128x64xf32>, tensor<2x1xi64>) -> tensor<2x1x64xf32>
    %1 = stablehlo.convert %0 : tensor<2x1x64xf32>
    %2 = "stablehlo.gather"(%arg2, %arg3) <{dimension_numbers = #stablehlo.gather<offset_dims = [2], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 2>, indices_are_sorted = false, slice_sizes = array<i64: 1, 64>}> : (tensor<32x64xf32>, tensor<2x1xi64>) -> tensor<2x1x64xf32>
    %3 = stablehlo.convert %2 : tensor<2x1x64xf32>
    %4 = stablehlo.add %1, %3 : tensor<2x1x64xf32>
    %5 = stablehlo.convert %cst_15 : (tensor<1xi64>) -> tensor<1xf32>
    %6 = stablehlo.reshape %5 : (tensor<1xf32>) -> tensor<f32>
    %7 = stablehlo.broadcast_in_dim %6, dims = [] : (tensor<f32>) -> tensor<2x1x64xf32>
    %8 = stablehlo.power %4, %7 : tensor<2x1x64xf32>
    %9 = stablehlo.reduce(%8 init: %cst_12) applies stablehlo.add across dimensions = [2] : (tensor<2x1x64xf32>, tensor<f32>) -> tensor<2x1xf32>
    %10 = stablehlo.reshape %9 : (tensor<2x1xf32>) -> tensor<2x1x1xf32>
    %11 = stablehlo.convert %cst_16 : (tensor<1xi64>) -> tensor<1xf32>
    %12 = stablehlo.reshape %11 : (tensor<1xf32>) -> tensor<f32>
    %13 = stablehlo.broadcast_in_dim %12, dims = [] : (tensor<f32>) -> tensor<2x1x1xf32>
    %14 = stablehlo.divide %10, %13 : tensor<2x1x1xf32>
    %15 = stablehlo.convert %cst_17 : (tensor<1xf64>) -> tensor<1xf32>
    %16 = stablehlo.reshape %15 : (tensor<1xf32>) -> tensor<f32>
    %17 = stablehlo.broadcast_in_dim %16, dims = [] : (tensor<f32>) -> tensor<2x1x1xf32>
    %18 = stablehlo.add %14, %17 : tensor<2x1x1xf32>
    %19 = stablehlo.rsqrt %18 : tensor<2x1x1xf32>
    %20 = stablehlo.broadcast_in_dim %19, dims = [0, 1, 2] : (tensor<2x1x1xf32>) -> tensor<2x1x64xf32>
    %21 = stablehlo.multiply %4, %20 : tensor<2x1x64xf32>
    %22 = stablehlo.broadcast_in_dim %arg4, dims = [2] : (tensor<64xf32>) -> tensor<2x1x64xf32>
    %23 = stablehlo.multiply %21, %22 : tensor<2x1x64xf32>
    %24 = stablehlo.transpose %arg5, dims = [1, 0] : (tensor<192x64xf32>) -> tensor<64x192xf32>
    %25 = stablehlo.reshape %23 : (tensor<2x1x64xf32>) -> tensor<2x64xf32>
    %26 = stablehlo.dot_general %25, %24, contracting_dims = [1] x [0] : (tensor<2x64xf32>, tensor<64x192xf32>) -> tensor<2x192xf32>
    %27 = stablehlo.reshape %26 : (tensor<2x192xf32>) -> tensor<2x1x192xf32>
    %28 = stablehlo.slice %27 [0:2, 0:1, 0:64] : (tensor<2x1x192xf32>) -> tensor<2x1x64xf32>
    %29 = stablehlo.slice %27 [0:2, 0:1, 64:128] : (tensor<2x1x192xf32>) -> tensor<2x1x64xf32>
    %30 = stablehlo.slice %27 [0:2, 0:1, 128:192] : (tensor<2x1x192xf32>) -> tensor<2x1x64xf32>
    %31 = stablehlo.reshape %28 : (tensor<2x1x64xf32>) -> tensor<2x1x4x16xf32>
    %32 = stablehlo.transpose %31, dims = [0, 2, 1, 3] : (tensor<2x1x4x16xf32>) -> tensor<2x4x1x16xf32>
    %33 = stablehlo.reshape %29 : (tensor<2x1x64xf32>) -> tensor<2x1x4x16xf32>
    %34 = stablehlo.transpose %33, dims = [0, 2, 1, 3] : (tensor<2x1x4x16xf32>) -> tensor<2x4x1x16xf32>
    %35 = stablehlo.reshape %30 : (tensor<2x1x64xf32>) -> tensor<2x1x4x16xf32>
    %36 = stablehlo.transpose %35, dims = [0, 2, 1, 3] : (tensor<2x1x4x16xf32>) -> tensor<2x4x1x16xf32>
    %37 = stablehlo.slice %arg3 [0:1, 0:1] : (tensor<2x1xi64>) -> tensor<1x1xi64>
    %38 = stablehlo.reshape %37 : (tensor<1x1xi64>) -> tensor<1xi64>
    %39 = stablehlo.convert %c_11 : (tensor<i64>) -> tensor<f64>
    %40 = stablehlo.convert %c_10 : (tensor<i64>) -> tensor<f64>
    %41 = stablehlo.divide %40, %39 : tensor<f64>
    %42 = stablehlo.ceil %41 : tensor<f64>
    %43 = stablehlo.convert %42 : (tensor<f64>) -> tensor<i64>
    %44 = stablehlo.reshape %43 : (tensor<i64>) -> tensor<1xi64>
    %45 = stablehlo.dynamic_iota %44, dim = 0 : (tensor<1xi64>) -> tensor<16xi64>
    %46 = stablehlo.multiply %45, %c_9 : tensor<16xi64>
    %47 = stablehlo.add %46, %c_8 : tensor<16xi64>
    %48 = stablehlo.reshape %38 : (tensor<1xi64>) -> tensor<1x1xi64>
    %49 = stablehlo.convert %c_7 : (tensor<i64>) -> tensor<f64>
    %50 = stablehlo.divide %49, %39 : tensor<f64>
    %51 = stablehlo.ceil %50 : tensor<f64>
    %52 = stablehlo.convert %51 : (tensor<f64>) -> tensor<i64>
    %53 = stablehlo.reshape %52 : (tensor<i64>) -> tensor<1xi64>
    %54 = stablehlo.dynamic_iota %53, dim = 0 : (tensor<1xi64>) -> tensor<4xi64>
    %55 = stablehlo.multiply %54, %c_6 : tensor<4xi64>
    %56 = stablehlo.add %55, %c_5 : tensor<4xi64>
    %57 = stablehlo.reshape %56 : (tensor<4xi64>) -> tensor<4x1xi64>
    %58 = stablehlo.reshape %57 : (tensor<4x1xi64>) -> tensor<4x1x1xi64>
    %59 = stablehlo.convert %c_4 : (tensor<i64>) -> tensor<f64>
    %60 = stablehlo.divide %59, %39 : tensor<f64>
    %61 = stablehlo.ceil %60 : tensor<f64>
    %62 = stablehlo.convert %61 : (tensor<f64>) -> tensor<i64>
    %63 = stablehlo.reshape %62 : (tensor<i64>) -> tensor<1xi64>
    %64 = stablehlo.dynamic_iota %63, dim = 0 : (tensor<1xi64>) -> tensor<2xi64>
    %65 = stablehlo.multiply %64, %c_3 : tensor<2xi64>
    %66 = stablehlo.add %65, %c_2 : tensor<2xi64>
    %67 = stablehlo.reshape %66 : (tensor<2xi64>) -> tensor<2x1xi64>
    %68 = stablehlo.reshape %67 : (tensor<2x1xi64>) -> tensor<2x1x1xi64>
    %69 = stablehlo.reshape %68 : (tensor<2x1x1xi64>) -> tensor<2x1x1x1xi64>
    %70 = stablehlo.broadcast_in_dim %69, dims = [0, 1, 2, 3] : (tensor<2x1x1x1xi64>) -> tensor<2x4x1x16xi64>
    %71 = stablehlo.reshape %70 : (tensor<2x4x1x16xi64>) -> tensor<2x4x1x16x1xi64>
    %72 = stablehlo.broadcast_in_dim %58, dims = [1, 2, 3] : (tensor<4x1x1xi64>) -> tensor<2x4x1x16xi64>
    %73 = stablehlo.reshape %72 : (tensor<2x4x1x16xi64>) -> tensor<2x4x1x16x1xi64>
    %74 = stablehlo.broadcast_in_dim %48, dims = [2, 3] : (tensor<1x1xi64>) -> tensor<2x4x1x16xi64>
    %75 = stablehlo.reshape %74 : (tensor<2x4x1x16xi64>) -> tensor<2x4x1x16x1xi64>
    %76 = stablehlo.broadcast_in_dim %47, dims = [3] : (tensor<16xi64>) -> tensor<2x4x1x16xi64>
    %77 = stablehlo.reshape %76 : (tensor<2x4x1x16xi64>) -> tensor<2x4x1x16x1xi64>
    %78 = stablehlo.concatenate %71, %73, %75, %77, dim = 4 : (tensor<2x4x1x16x1xi64>, tensor<2x4x1x16x1xi64>, tensor<2x4x1x16x1xi64>, tensor<2x4x1x16x1xi64>) -> tensor<2x4x1x16x4xi64>
    %79 = "stablehlo.scatter"(%arg6, %78, %34) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0, 1, 2, 3], scatter_dims_to_operand_dims = [0, 1, 2, 3], index_vector_dim = 4>, unique_indices = false}> ({
    ^bb0(%arg24: tensor<f32>, %arg25: tensor<f32>):
      stablehlo.return %arg25 : tensor<f32>
    }) : (tensor<2x4x32x16xf32>, tensor<2x4x1x16x4xi64>, tensor<2x4x1x16xf32>) -> tensor<2x4x32x16xf32>
    %80 = "stablehlo.scatter"(%arg7, %78, %36) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0, 1, 2, 3], scatter_dims_to_operand_dims = [0, 1, 2, 3], index_vector_dim = 4>, unique_indices = false}> ({
    ^bb0(%arg24: tensor<f32>, %arg25: tensor<f32>):
      stablehlo.return %arg25 : tensor<f32>
    }) : (tensor<2x4x32x16xf32>, tensor<2x4x1x16x4xi64>, tensor<2x4x1x16xf32>) -> tensor<2x4x32x16xf32>
    %81 = stablehlo.convert %c_1 : (tensor<i64>) -> tensor<f64>
    %82 = stablehlo.divide %81, %39 : tensor<f64>
    %83 = stablehlo.ceil %82 : tensor<f64>
    %84 = stablehlo.convert %83 : (tensor<f64>) -> tensor<i64>
    %85 = stablehlo.reshape %84 : (tensor<i64>) -> tensor<1xi64>
    %86 = stablehlo.dynamic_iota %85, dim = 0 : (tensor<1xi64>) -> tensor<32xi64>
    %87 = stablehlo.multiply %86, %c_0 : tensor<32xi64>
    %88 = stablehlo.add %87, %c : tensor<32xi64>
    %89 = stablehlo.reshape %88 : (tensor<32xi64>) -> tensor<1x1x1x32xi64>
    %90 = stablehlo.reshape %arg3 : (tensor<2x1xi64>) -> tensor<2x1x1x1xi64>
    %91 = stablehlo.broadcast_in_dim %89, dims = [0, 1, 2, 3] : (tensor<1x1x1x32xi64>) -> tensor<2x1x1x32xi64>
    %92 = stablehlo.broadcast_in_dim %90, dims = [0, 1, 2, 3] : (tensor<2x1x1x1xi64>) -> tensor<2x1x1x32xi64>
    %93 = stablehlo.compare LE, %91, %92, SIGNED : (tensor<2x1x1x32xi64>, tensor<2x1x1x32xi64>) -> tensor<2x1x1x32xi1>
    %94 = stablehlo.broadcast_in_dim %93, dims = [0, 1, 2, 3] : (tensor<2x1x1x32xi1>) -> tensor<2x1x1x32xi1>
    %95 = stablehlo.broadcast_in_dim %cst_12, dims = [] : (tensor<f32>) -> tensor<2x1x1x32xf32>
    %96 = stablehlo.broadcast_in_dim %cst_13, dims = [] : (tensor<f32>) -> tensor<2x1x1x32xf32>
    %97 = stablehlo.select %94, %95, %96 : tensor<2x1x1x32xi1>, tensor<2x1x1x32xf32>
    %98 = stablehlo.convert %cst_18 : (tensor<1xf64>) -> tensor<1xf32>
    %99 = stablehlo.reshape %98 : (tensor<1xf32>) -> tensor<f32>
    %100 = stablehlo.broadcast_in_dim %99, dims = [] : (tensor<f32>) -> tensor<2x4x1x16xf32>
    %101 = stablehlo.multiply %32, %100 : tensor<2x4x1x16xf32>
    %102 = stablehlo.transpose %79, dims = [0, 1, 3, 2] : (tensor<2x4x32x16xf32>) -> tensor<2x4x16x32xf32>
    %103 = stablehlo.broadcast_in_dim %99, dims = [] : (tensor<f32>) -> tensor<2x4x16x32xf32>
    %104 = stablehlo.multiply %102, %103 : tensor<2x4x16x32xf32>
    %105 = stablehlo.reshape %101 : (tensor<2x4x1x16xf32>) -> tensor<8x1x16xf32>
    %106 = stablehlo.reshape %104 : (tensor<2x4x16x32xf32>) -> tensor<8x16x32xf32>
    %107 = stablehlo.broadcast_in_dim %106, dims = [0, 1, 2] : (tensor<8x16x32xf32>) -> tensor<8x16x32xf32>
    %108 = stablehlo.dot_general %105, %107, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<8x1x16xf32>, tensor<8x16x32xf32>) -> tensor<8x1x32xf32>
    %109 = stablehlo.reshape %108 : (tensor<8x1x32xf32>) -> tensor<2x4x1x32xf32>
    %110 = stablehlo.broadcast_in_dim %97, dims = [0, 1, 2, 3] : (tensor<2x1x1x32xf32>) -> tensor<2x4x1x32xf32>
    %111 = stablehlo.add %109, %110 : tensor<2x4x1x32xf32>
    %112 = stablehlo.reduce(%111 init: %cst_13) applies stablehlo.maximum across dimensions = [3] : (tensor<2x4x1x32xf32>, tensor<f32>) -> tensor<2x4x1xf32>
    %113 = stablehlo.reshape %112 : (tensor<2x4x1xf32>) -> tensor<2x4x1x1xf32>
    %114 = stablehlo.broadcast_in_dim %113, dims = [0, 1, 2, 3] : (tensor<2x4x1x1xf32>) -> tensor<2x4x1x32xf32>
    %115 = stablehlo.subtract %111, %114 : tensor<2x4x1x32xf32>
    %116 = stablehlo.exponential %115 : tensor<2x4x1x32xf32>
    %117 = stablehlo.reduce(%116 init: %cst_12) applies stablehlo.add across dimensions = [3] : (tensor<2x4x1x32xf32>, tensor<f32>) -> tensor<2x4x1xf32>
    %118 = stablehlo.reshape %117 : (tensor<2x4x1xf32>) -> tensor<2x4x1x1xf32>
    %119 = stablehlo.broadcast_in_dim %118, dims = [0, 1, 2, 3] : (tensor<2x4x1x1xf32>) -> tensor<2x4x1x32xf32>
    %120 = stablehlo.divide %116, %119 : tensor<2x4x1x32xf32>
    %121 = stablehlo.convert %cst_19 : tensor<1xf64>
    %122 = stablehlo.reshape %121 : (tensor<1xf64>) -> tensor<f64>
    %123 = stablehlo.convert %122 : (tensor<f64>) -> tensor<f32>
    %124 = stablehlo.broadcast_in_dim %123, dims = [] : (tensor<f32>) -> tensor<2x4x1x32xf32>
    %125 = stablehlo.compare EQ, %111, %124, FLOAT : (tensor<2x4x1x32xf32>, tensor<2x4x1x32xf32>) -> tensor<2x4x1x32xi1>
    %126 = stablehlo.not %125 : tensor<2x4x1x32xi1>
    %127 = stablehlo.reduce(%126 init: %c_14) applies stablehlo.or across dimensions = [3] : (tensor<2x4x1x32xi1>, tensor<i1>) -> tensor<2x4x1xi1>
    %128 = stablehlo.reshape %127 : (tensor<2x4x1xi1>) -> tensor<2x4x1x1xi1>
    %129 = stablehlo.not %128 : tensor<2x4x1x1xi1>
    %130 = stablehlo.broadcast_in_dim %129, dims = [0, 1, 2, 3] : (tensor<2x4x1x1xi1>) -> tensor<2x4x1x32xi1>
    %131 = stablehlo.broadcast_in_dim %cst, dims = [0, 1, 2, 3] : (tensor<2x4x1x32xf32>) -> tensor<2x4x1x32xf32>
    %132 = stablehlo.broadcast_in_dim %120, dims = [0, 1, 2, 3] : (tensor<2x4x1x32xf32>) -> tensor<2x4x1x32xf32>
    %133 = stablehlo.select %130, %131, %132 : tensor<2x4x1x32xi1>, tensor<2x4x1x32xf32>
    %134 = stablehlo.reshape %133 : (tensor<2x4x1x32xf32>) -> tensor<8x1x32xf32>
    %135 = stablehlo.reshape %80 : (tensor<2x4x32x16xf32>) -> tensor<8x32x16xf32>
    %136 = stablehlo.broadcast_in_dim %135, dims = [0, 1, 2] : (tensor<8x32x16xf32>) -> tensor<8x32x16xf32>
    %137 = stablehlo.dot_general %134, %136, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<8x1x32xf32>, tensor<8x32x16xf32>) -> tensor<8x1x16xf32>
    %138 = stablehlo.reshape %137 : (tensor<8x1x16xf32>) -> tensor<2x4x1x16xf32>
    %139 = stablehlo.transpose %138, dims = [2, 0, 1, 3] : (tensor<2x4x1x16xf32>) -> tensor<1x2x4x16xf32>
    %140 = stablehlo.transpose %139, dims = [1, 2, 0, 3] : (tensor<1x2x4x16xf32>) -> tensor<2x4x1x16xf32>
    %141 = stablehlo.transpose %140, dims = [0, 2, 1, 3] : (tensor<2x4x1x16xf32>) -> tensor<2x1x4x16xf32>
    %142 = stablehlo.reshape %141 : (tensor<2x1x4x16xf32>) -> tensor<2x1x64xf32>
    %143 = stablehlo.transpose %arg8, dims = [1, 0] : (tensor<64x64xf32>) -> tensor<64x64xf32>
    %144 = stablehlo.reshape %142 : (tensor<2x1x64xf32>) -> tensor<2x64xf32>
    %145 = stablehlo.dot_general %144, %143, contracting_dims = [1] x [0] : (tensor<2x64xf32>, tensor<64x64xf32>) -> tensor<2x64xf32>
    %146 = stablehlo.reshape %145 : (tensor<2x64xf32>) -> tensor<2x1x64xf32>
    %147 = stablehlo.add %4, %146 : tensor<2x1x64xf32>
    %148 = stablehlo.power %147, %7 : tensor<2x1x64xf32>
    %149 = stablehlo.reduce(%148 init: %cst_12) applies stablehlo.add across dimensions = [2] : (tensor<2x1x64xf32>, tensor<f32>) -> tensor<2x1xf32>
    %150 = stablehlo.reshape %149 : (tensor<2x1xf32>) -> tensor<2x1x1xf32>
    %151 = stablehlo.divide %150, %13 : tensor<2x1x1xf32>
    %152 = stablehlo.add %151, %17 : tensor<2x1x1xf32>
    %153 = stablehlo.rsqrt %152 : tensor<2x1x1xf32>
    %154 = stablehlo.broadcast_in_dim %153, dims = [0, 1, 2] : (tensor<2x1x1xf32>) -> tensor<2x1x64xf32>
    %155 = stablehlo.multiply %147, %154 : tensor<2x1x64xf32>
    %156 = stablehlo.broadcast_in_dim %arg9, dims = [2] : (tensor<64xf32>) -> tensor<2x1x64xf32>
    %157 = stablehlo.multiply %155, %156 : tensor<2x1x64xf32>
    %158 = stablehlo.transpose %arg10, dims = [1, 0] : (tensor<128x64xf32>) -> tensor<64x128xf32>
    %159 = stablehlo.reshape %157 : (tensor<2x1x64xf32>) -> tensor<2x64xf32>
    %160 = stablehlo.dot_general %159, %158, contracting_dims = [1] x [0] : (tensor<2x64xf32>, tensor<64x128xf32>) -> tensor<2x128xf32>
    %161 = stablehlo.reshape %160 : (tensor<2x128xf32>) -> tensor<2x1x128xf32>
    %162 = stablehlo.logistic %161 : tensor<2x1x128xf32>
    %163 = stablehlo.multiply %161, %162 : tensor<2x1x128xf32>
    %164 = stablehlo.transpose %arg11, dims = [1, 0] : (tensor<128x64xf32>) -> tensor<64x128xf32>
    %165 = stablehlo.dot_general %159, %164, contracting_dims = [1] x [0] : (tensor<2x64xf32>, tensor<64x128xf32>) -> tensor<2x128xf32>
    %166 = stablehlo.reshape %165 : (tensor<2x128xf32>) -> tensor<2x1x128xf32>
    %167 = stablehlo.multiply %163, %166 : tensor<2x1x128xf32>
    %168 = stablehlo.transpose %arg12, dims = [1, 0] : (tensor<64x128xf32>) -> tensor<128x64xf32>
    %169 = stablehlo.reshape %167 : (tensor<2x1x128xf32>) -> tensor<2x128xf32>
    %170 = stablehlo.dot_general %169, %168, contracting_dims = [1] x [0] : (tensor<2x128xf32>, tensor<128x64xf32>) -> tensor<2x64xf32>
    %171 = stablehlo.reshape %170 : (tensor<2x64xf32>) -> tensor<2x1x64xf32>
    %172 = stablehlo.add %147, %171 : tensor<2x1x64xf32>
    %173 = stablehlo.power %172, %7 : tensor<2x1x64xf32>
    %174 = stablehlo.reduce(%173 init: %cst_12) applies stablehlo.add across dimensions = [2] : (tensor<2x1x64xf32>, tensor<f32>) -> tensor<2x1xf32>
    %175 = stablehlo.reshape %174 : (tensor<2x1xf32>) -> tensor<2x1x1xf32>
    %176 = stablehlo.divide %175, %13 : tensor<2x1x1xf32>
    %177 = stablehlo.add %176, %17 : tensor<2x1x1xf32>
    %178 = stablehlo.rsqrt %177 : tensor<2x1x1xf32>
    %179 = stablehlo.broadcast_in_dim %178, dims = [0, 1, 2] : (tensor<2x1x1xf32>) -> tensor<2x1x64xf32>
    %180 = stablehlo.multiply %172, %179 : tensor<2x1x64xf32>
    %181 = stablehlo.broadcast_in_dim %arg13, dims = [2] : (tensor<64xf32>) -> tensor<2x1x64xf32>
    %182 = stablehlo.multiply %180, %181 : tensor<2x1x64xf32>
    %183 = stablehlo.transpose %arg14, dims = [1, 0] : (tensor<192x64xf32>) -> tensor<64x192xf32>
    %184 = stablehlo.reshape %182 : (tensor<2x1x64xf32>) -> tensor<2x64xf32>
    %185 = stablehlo.dot_general %184, %183, contracting_dims = [1] x [0] : (tensor<2x64xf32>, tensor<64x192xf32>) -> tensor<2x192xf32>
    %186 = stablehlo.reshape %185 : (tensor<2x192xf32>) -> tensor<2x1x192xf32>
    %187 = stablehlo.slice %186 [0:2, 0:1, 0:64] : (tensor<2x1x192xf32>) -> tensor<2x1x64xf32>
    %188 = stablehlo.slice %186 [0:2, 0:1, 64:128] : (tensor<2x1x192xf32>) -> tensor<2x1x64xf32>
    %189 = stablehlo.slice %186 [0:2, 0:1, 128:192] : (tensor<2x1x192xf32>) -> tensor<2x1x64xf32>
    %190 = stablehlo.reshape %187 : (tensor<2x1x64xf32>) -> tensor<2x1x4x16xf32>
    %191 = stablehlo.transpose %190, dims = [0, 2, 1, 3] : (tensor<2x1x4x16xf32>) -> tensor<2x4x1x16xf32>
    %192 = stablehlo.reshape %188 : (tensor<2x1x64xf32>) -> tensor<2x1x4x16xf32>
    %193 = stablehlo.transpose %192, dims = [0, 2, 1, 3] : (tensor<2x1x4x16xf32>) -> tensor<2x4x1x16xf32>
    %194 = stablehlo.reshape %189 : (tensor<2x1x64xf32>) -> tensor<2x1x4x16xf32>
    %195 = stablehlo.transpose %194, dims = [0, 2, 1, 3] : (tensor<2x1x4x16xf32>) -> tensor<2x4x1x16xf32>
    %196 = "stablehlo.scatter"(%arg15, %78, %193) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0, 1, 2, 3], scatter_dims_to_operand_dims = [0, 1, 2, 3], index_vector_dim = 4>, unique_indices = false}> ({
    ^bb0(%arg24: tensor<f32>, %arg25: tensor<f32>):
      stablehlo.return %arg25 : tensor<f32>
    }) : (tensor<2x4x32x16xf32>, tensor<2x4x1x16x4xi64>, tensor<2x4x1x16xf32>) -> tensor<2x4x32x16xf32>
    %197 = "stablehlo.scatter"(%arg16, %78, %195) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0, 1, 2, 3], scatter_dims_to_operand_dims = [0, 1, 2, 3], index_vector_dim = 4>, unique_indices = false}> ({
    ^bb0(%arg24: tensor<f32>, %arg25: tensor<f32>):
      stablehlo.return %arg25 : tensor<f32>
    }) : (tensor<2x4x32x16xf32>, tensor<2x4x1x16x4xi64>, tensor<2x4x1x16xf32>) -> tensor<2x4x32x16xf32>
    %198 = stablehlo.multiply %191, %100 : tensor<2x4x1x16xf32>
    %199 = stablehlo.transpose %196, dims = [0, 1, 3, 2] : (tensor<2x4x32x16xf32>) -> tensor<2x4x16x32xf32>
    %200 = stablehlo.multiply %199, %103 : tensor<2x4x16x32xf32>
    %201 = stablehlo.reshape %198 : (tensor<2x4x1x16xf32>) -> tensor<8x1x16xf32>
    %202 = stablehlo.reshape %200 : (tensor<2x4x16x32xf32>) -> tensor<8x16x32xf32>
    %203 = stablehlo.broadcast_in_dim %202, dims = [0, 1, 2] : (tensor<8x16x32xf32>) -> tensor<8x16x32xf32>
    %204 = stablehlo.dot_general %201, %203, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<8x1x16xf32>, tensor<8x16x32xf32>) -> tensor<8x1x32xf32>
    %205 = stablehlo.reshape %204 : (tensor<8x1x32xf32>) -> tensor<2x4x1x32xf32>
    %206 = stablehlo.add %205, %110 : tensor<2x4x1x32xf32>
    %207 = stablehlo.reduce(%206 init: %cst_13) applies stablehlo.maximum across dimensions = [3] : (tensor<2x4x1x32xf32>, tensor<f32>) -> tensor<2x4x1xf32>
    %208 = stablehlo.reshape %207 : (tensor<2x4x1xf32>) -> tensor<2x4x1x1xf32>
    %209 = stablehlo.broadcast_in_dim %208, dims = [0, 1, 2, 3] : (tensor<2x4x1x1xf32>) -> tensor<2x4x1x32xf32>
    %210 = stablehlo.subtract %206, %209 : tensor<2x4x1x32xf32>
    %211 = stablehlo.exponential %210 : tensor<2x4x1x32xf32>
    %212 = stablehlo.reduce(%211 init: %cst_12) applies stablehlo.add across dimensions = [3] : (tensor<2x4x1x32xf32>, tensor<f32>) -> tensor<2x4x1xf32>
    %213 = stablehlo.reshape %212 : (tensor<2x4x1xf32>) -> tensor<2x4x1x1xf32>
    %214 = stablehlo.broadcast_in_dim %213, dims = [0, 1, 2, 3] : (tensor<2x4x1x1xf32>) -> tensor<2x4x1x32xf32>
    %215 = stablehlo.divide %211, %214 : tensor<2x4x1x32xf32>
    %216 = stablehlo.compare EQ, %206, %124, FLOAT : (tensor<2x4x1x32xf32>, tensor<2x4x1x32xf32>) -> tensor<2x4x1x32xi1>
    %217 = stablehlo.not %216 : tensor<2x4x1x32xi1>
    %218 = stablehlo.reduce(%217 init: %c_14) applies stablehlo.or across dimensions = [3] : (tensor<2x4x1x32xi1>, tensor<i1>) -> tensor<2x4x1xi1>
    %219 = stablehlo.reshape %218 : (tensor<2x4x1xi1>) -> tensor<2x4x1x1xi1>
    %220 = stablehlo.not %219 : tensor<2x4x1x1xi1>
    %221 = stablehlo.broadcast_in_dim %220, dims = [0, 1, 2, 3] : (tensor<2x4x1x1xi1>) -> tensor<2x4x1x32xi1>
    %222 = stablehlo.broadcast_in_dim %215, dims = [0, 1, 2, 3] : (tensor<2x4x1x32xf32>) -> tensor<2x4x1x32xf32>
    %223 = stablehlo.select %221, %131, %222 : tensor<2x4x1x32xi1>, tensor<2x4x1x32xf32>
    %224 = stablehlo.reshape %223 : (tensor<2x4x1x32xf32>) -> tensor<8x1x32xf32>
    %225 = stablehlo.reshape %197 : (tensor<2x4x32x16xf32>) -> tensor<8x32x16xf32>
    %226 = stablehlo.broadcast_in_dim %225, dims = [0, 1, 2] : (tensor<8x32x16xf32>) -> tensor<8x32x16xf32>
    %227 = stablehlo.dot_general %224, %226, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<8x1x32xf32>, tensor<8x32x16xf32>) -> tensor<8x1x16xf32>
    %228 = stablehlo.reshape %227 : (tensor<8x1x16xf32>) -> tensor<2x4x1x16xf32>
    %229 = stablehlo.transpose %228, dims = [2, 0, 1, 3] : (tensor<2x4x1x16xf32>) -> tensor<1x2x4x16xf32>
    %230 = stablehlo.transpose %229, dims = [1, 2, 0, 3] : (tensor<1x2x4x16xf32>) -> tensor<2x4x1x16xf32>
    %231 = stablehlo.transpose %230, dims = [0, 2, 1, 3] : (tensor<2x4x1x16xf32>) -> tensor<2x1x4x16xf32>
    %232 = stablehlo.reshape %231 : (tensor<2x1x4x16xf32>) -> tensor<2x1x64xf32>
    %233 = stablehlo.transpose %arg17, dims = [1, 0] : (tensor<64x64xf32>) -> tensor<64x64xf32>
    %234 = stablehlo.reshape %232 : (tensor<2x1x64xf32>) -> tensor<2x64xf32>
    %235 = stablehlo.dot_general %234, %233, contracting_dims = [1] x [0] : (tensor<2x64xf32>, tensor<64x64xf32>) -> tensor<2x64xf32>
    %236 = stablehlo.reshape %235 : (tensor<2x64xf32>) -> tensor<2x1x64xf32>
    %237 = stablehlo.add %172, %236 : tensor<2x1x64xf32>
    %238 = stablehlo.power %237, %7 : tensor<2x1x64xf32>
    %239 = stablehlo.reduce(%238 init: %cst_12) applies stablehlo.add across dimensions = [2] : (tensor<2x1x64xf32>, tensor<f32>) -> tensor<2x1xf32>
    %240 = stablehlo.reshape %239 : (tensor<2x1xf32>) -> tensor<2x1x1xf32>
    %241 = stablehlo.divide %240, %13 : tensor<2x1x1xf32>
    %242 = stablehlo.add %241, %17 : tensor<2x1x1xf32>
    %243 = stablehlo.rsqrt %242 : tensor<2x1x1xf32>
    %244 = stablehlo.broadcast_in_dim %243, dims = [0, 1, 2] : (tensor<2x1x1xf32>) -> tensor<2x1x64xf32>
    %245 = stablehlo.multiply %237, %244 : tensor<2x1x64xf32>
    %246 = stablehlo.broadcast_in_dim %arg18, dims = [2] : (tensor<64xf32>) -> tensor<2x1x64xf32>
    %247 = stablehlo.multiply %245, %246 : tensor<2x1x64xf32>
    %248 = stablehlo.transpose %arg19, dims = [1, 0] : (tensor<128x64xf32>) -> tensor<64x128xf32>
    %249 = stablehlo.reshape %247 : (tensor<2x1x64xf32>) -> tensor<2x64xf32>
    %250 = stablehlo.dot_general %249, %248, contracting_dims = [1] x [0] : (tensor<2x64xf32>, tensor<64x128xf32>) -> tensor<2x128xf32>
    %251 = stablehlo.reshape %250 : (tensor<2x128xf32>) -> tensor<2x1x128xf32>
    %252 = stablehlo.logistic %251 : tensor<2x1x128xf32>
    %253 = stablehlo.multiply %251, %252 : tensor<2x1x128xf32>
    %254 = stablehlo.transpose %arg20, dims = [1, 0] : (tensor<128x64xf32>) -> tensor<64x128xf32>
    %255 = stablehlo.dot_general %249, %254, contracting_dims = [1] x [0] : (tensor<2x64xf32>, tensor<64x128xf32>) -> tensor<2x128xf32>
    %256 = stablehlo.reshape %255 : (tensor<2x128xf32>) -> tensor<2x1x128xf32>
    %257 = stablehlo.multiply %253, %256 : tensor<2x1x128xf32>
    %258 = stablehlo.transpose %arg21, dims = [1, 0] : (tensor<64x128xf32>) -> tensor<128x64xf32>
    %259 = stablehlo.reshape %257 : (tensor<2x1x128xf32>) -> tensor<2x128xf32>
    %260 = stablehlo.dot_general %259, %258, contracting_dims = [1] x [0] : (tensor<2x128xf32>, tensor<128x64xf32>) -> tensor<2x64xf32>
    %261 = stablehlo.reshape %260 : (tensor<2x64xf32>) -> tensor<2x1x64xf32>
    %262 = stablehlo.add %237, %261 : tensor<2x1x64xf32>
    %263 = stablehlo.power %262, %7 : tensor<2x1x64xf32>
    %264 = stablehlo.reduce(%263 init: %cst_12) applies stablehlo.add across dimensions = [2] : (tensor<2x1x64xf32>, tensor<f32>) -> tensor<2x1xf32>
    %265 = stablehlo.reshape %264 : (tensor<2x1xf32>) -> tensor<2x1x1xf32>
    %266 = stablehlo.divide %265, %13 : tensor<2x1x1xf32>
    %267 = stablehlo.add %266, %17 : tensor<2x1x1xf32>
    %268 = stablehlo.rsqrt %267 : tensor<2x1x1xf32>
    %269 = stablehlo.broadcast_in_dim %268, dims = [0, 1, 2] : (tensor<2x1x1xf32>) -> tensor<2x1x64xf32>
    %270 = stablehlo.multiply %262, %269 : tensor<2x1x64xf32>
    %271 = stablehlo.broadcast_in_dim %arg22, dims = [2] : (tensor<64xf32>) -> tensor<2x1x64xf32>
    %272 = stablehlo.multiply %270, %271 : tensor<2x1x64xf32>
    %273 = stablehlo.transpose %arg23, dims = [1, 0] : (tensor<128x64xf32>) -> tensor<64x128xf32>
    %274 = stablehlo.reshape %272 : (tensor<2x1x64xf32>) -> tensor<2x64xf32>
    %275 = stablehlo.dot_general %274, %273, contracting_dims = [1] x [0] : (tensor<2x64xf32>, tensor<64x128xf32>) -> tensor<2x128xf32>
    %276 = stablehlo.reshape %275 : (tensor<2x128xf32>) -> tensor<2x1x128xf32>
    return %79, %80, %196, %197, %276 : tensor<2x4x32x16xf32>, tensor<2x4x32x16xf32>, tensor<2x4x32x16xf32>, tensor<2x4x32x16xf32>, tensor<2x1x128xf32>
  }
}
