// summary: @main(tensor<128x64xf32>, tensor<2x1xi64>, tensor<32x64xf32>, tensor<2x1xi64>, tensor<64xf32>, tensor<192x64xf32>, tensor<2x4x32x16xf32>, tensor<2x4x32x16xf32>, tensor<64x64xf32>, tensor<64xf32>, tensor<128x64xf32>, tensor<128x64xf32>, tensor<64x128xf32>, tensor<64xf32>, tensor<192x64xf32>, tensor<2x4x32x16xf32>, tensor<2x4x32x16xf32>, tensor<64x64xf32>, tensor<64xf32>, tensor<128x64xf32>, tensor<128x64xf32>, tensor<64x128xf32>, tensor<64xf32>, tensor<128x64xf32>) -> (tensor<2x4x32x16xf32>, tensor<2x4x32x16xf32>, tensor<2x4x32x16xf32>, tensor<2x4x32x16xf32>, tensor<2x1x128xf32>) | ops: arith.constant=5 stablehlo.add=17 stablehlo.broadcast_in_dim=42 stablehlo.ceil=4 stablehlo.compare=4 stablehlo.concatenate=1 stablehlo.constant=19 stablehlo.convert=17 stablehlo.divide=11 stablehlo.dot_general=15 stablehlo.dynamic_iota=4 stablehlo.exponential=2 stablehlo.gather=2 stablehlo.logistic=2 stablehlo.multiply=22 stablehlo.not=4 stablehlo.power=5 stablehlo.reduce=11 stablehlo.reshape=73 stablehlo.return=4 stablehlo.rsqrt=5 stablehlo.scatter=4 stablehlo.select=4 stablehlo.slice=7 stablehlo.subtract=2 stablehlo.transpose=25
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
    %c_12 = stablehlo.constant dense<32> : tensor<1xi64>
    %c_13 = stablehlo.constant dense<0> : tensor<1xi64>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<2x4x1x32xf32>
    %cst_14 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %cst_15 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %c_16 = stablehlo.constant dense<false> : tensor<i1>
    %cst_17 = arith.constant dense<2> : tensor<1xi64>
    %cst_18 = arith.constant dense<64> : tensor<1xi64>
    %cst_19 = arith.constant dense<9.9999999747524271E-7> : tensor<1xf64>
    %cst_20 = arith.constant dense<5.000000e-01> : tensor<1xf64>
    %cst_21 = arith.constant dense<0xFFF0000000000000> : tensor<1xf64>
    %0 = "stablehlo.gather"(%arg0, %arg1) <{dimension_numbers = #stablehlo.gather<offset_dims = [2], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 2>, indices_are_sorted = false, slice_sizes = array<i64: 1, 64>}> : (tensor<128x64xf32>, tensor<2x1xi64>) -> tensor<2x1x64xf32>
    %1 = stablehlo.convert %0 : tensor<2x1x64xf32>
    %2 = "stablehlo.gather"(%arg2, %arg3) <{dimension_numbers = #stablehlo.gather<offset_dims = [2], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 2>, indices_are_sorted = false, slice_sizes = array<i64: 1, 64>}> : (tensor<32x64xf32>, tensor<2x1xi64>) -> tensor<2x1x64xf32>
    %3 = stablehlo.convert %2 : tensor<2x1x64xf32>
    %4 = stablehlo.add %1, %3 : tensor<2x1x64xf32>
    %5 = stablehlo.convert %cst_17 : (tensor<1xi64>) -> tensor<1xf32>
    %6 = stablehlo.reshape %5 : (tensor<1xf32>) -> tensor<f32>
    %7 = stablehlo.broadcast_in_dim %6, dims = [] : (tensor<f32>) -> tensor<2x1x64xf32>
    %8 = stablehlo.power %4, %7 : tensor<2x1x64xf32>
    %9 = stablehlo.reduce(%8 init: %cst_14) applies stablehlo.add across dimensions = [2] : (tensor<2x1x64xf32>, tensor<f32>) -> tensor<2x1xf32>
    %10 = stablehlo.reshape %9 : (tensor<2x1xf32>) -> tensor<2x1x1xf32>
    %11 = stablehlo.convert %cst_18 : (tensor<1xi64>) -> tensor<1xf32>
    %12 = stablehlo.reshape %11 : (tensor<1xf32>) -> tensor<f32>
    %13 = stablehlo.broadcast_in_dim %12, dims = [] : (tensor<f32>) -> tensor<2x1x1xf32>
    %14 = stablehlo.divide %10, %13 : tensor<2x1x1xf32>
    %15 = stablehlo.convert %cst_19 : (tensor<1xf64>) -> tensor<1xf32>
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
    %39 = stablehlo.compare LT, %38, %c_13, SIGNED : (tensor<1xi64>, tensor<1xi64>) -> tensor<1xi1>
    %40 = stablehlo.add %38, %c_12 : tensor<1xi64>
    %41 = stablehlo.broadcast_in_dim %39, dims = [0] : (tensor<1xi1>) -> tensor<1xi1>
    %42 = stablehlo.broadcast_in_dim %40, dims = [0] : (tensor<1xi64>) -> tensor<1xi64>
    %43 = stablehlo.broadcast_in_dim %38, dims = [0] : (tensor<1xi64>) -> tensor<1xi64>
    %44 = stablehlo.select %41, %42, %43 : tensor<1xi1>, tensor<1xi64>
    %45 = stablehlo.convert %c_11 : (tensor<i64>) -> tensor<f64>
    %46 = stablehlo.convert %c_10 : (tensor<i64>) -> tensor<f64>
    %47 = stablehlo.divide %46, %45 : tensor<f64>
    %48 = stablehlo.ceil %47 : tensor<f64>
    %49 = stablehlo.convert %48 : (tensor<f64>) -> tensor<i64>
    %50 = stablehlo.reshape %49 : (tensor<i64>) -> tensor<1xi64>
    %51 = stablehlo.dynamic_iota %50, dim = 0 : (tensor<1xi64>) -> tensor<16xi64>
    %52 = stablehlo.multiply %51, %c_9 : tensor<16xi64>
    %53 = stablehlo.add %52, %c_8 : tensor<16xi64>
    %54 = stablehlo.reshape %44 : (tensor<1xi64>) -> tensor<1x1xi64>
    %55 = stablehlo.convert %c_7 : (tensor<i64>) -> tensor<f64>
    %56 = stablehlo.divide %55, %45 : tensor<f64>
    %57 = stablehlo.ceil %56 : tensor<f64>
    %58 = stablehlo.convert %57 : (tensor<f64>) -> tensor<i64>
    %59 = stablehlo.reshape %58 : (tensor<i64>) -> tensor<1xi64>
    %60 = stablehlo.dynamic_iota %59, dim = 0 : (tensor<1xi64>) -> tensor<4xi64>
    %61 = stablehlo.multiply %60, %c_6 : tensor<4xi64>
    %62 = stablehlo.add %61, %c_5 : tensor<4xi64>
    %63 = stablehlo.reshape %62 : (tensor<4xi64>) -> tensor<4x1xi64>
    %64 = stablehlo.reshape %63 : (tensor<4x1xi64>) -> tensor<4x1x1xi64>
    %65 = stablehlo.convert %c_4 : (tensor<i64>) -> tensor<f64>
    %66 = stablehlo.divide %65, %45 : tensor<f64>
    %67 = stablehlo.ceil %66 : tensor<f64>
    %68 = stablehlo.convert %67 : (tensor<f64>) -> tensor<i64>
    %69 = stablehlo.reshape %68 : (tensor<i64>) -> tensor<1xi64>
    %70 = stablehlo.dynamic_iota %69, dim = 0 : (tensor<1xi64>) -> tensor<2xi64>
    %71 = stablehlo.multiply %70, %c_3 : tensor<2xi64>
    %72 = stablehlo.add %71, %c_2 : tensor<2xi64>
    %73 = stablehlo.reshape %72 : (tensor<2xi64>) -> tensor<2x1xi64>
    %74 = stablehlo.reshape %73 : (tensor<2x1xi64>) -> tensor<2x1x1xi64>
    %75 = stablehlo.reshape %74 : (tensor<2x1x1xi64>) -> tensor<2x1x1x1xi64>
    %76 = stablehlo.broadcast_in_dim %75, dims = [0, 1, 2, 3] : (tensor<2x1x1x1xi64>) -> tensor<2x4x1x16xi64>
    %77 = stablehlo.reshape %76 : (tensor<2x4x1x16xi64>) -> tensor<2x4x1x16x1xi64>
    %78 = stablehlo.broadcast_in_dim %64, dims = [1, 2, 3] : (tensor<4x1x1xi64>) -> tensor<2x4x1x16xi64>
    %79 = stablehlo.reshape %78 : (tensor<2x4x1x16xi64>) -> tensor<2x4x1x16x1xi64>
    %80 = stablehlo.broadcast_in_dim %54, dims = [2, 3] : (tensor<1x1xi64>) -> tensor<2x4x1x16xi64>
    %81 = stablehlo.reshape %80 : (tensor<2x4x1x16xi64>) -> tensor<2x4x1x16x1xi64>
    %82 = stablehlo.broadcast_in_dim %53, dims = [3] : (tensor<16xi64>) -> tensor<2x4x1x16xi64>
    %83 = stablehlo.reshape %82 : (tensor<2x4x1x16xi64>) -> tensor<2x4x1x16x1xi64>
    %84 = stablehlo.concatenate %77, %79, %81, %83, dim = 4 : (tensor<2x4x1x16x1xi64>, tensor<2x4x1x16x1xi64>, tensor<2x4x1x16x1xi64>, tensor<2x4x1x16x1xi64>) -> tensor<2x4x1x16x4xi64>
    %85 = "stablehlo.scatter"(%arg6, %84, %34) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0, 1, 2, 3], scatter_dims_to_operand_dims = [0, 1, 2, 3], index_vector_dim = 4>, unique_indices = false}> ({
    ^bb0(%arg24: tensor<f32>, %arg25: tensor<f32>):
      stablehlo.return %arg25 : tensor<f32>
    }) : (tensor<2x4x32x16xf32>, tensor<2x4x1x16x4xi64>, tensor<2x4x1x16xf32>) -> tensor<2x4x32x16xf32>
    %86 = "stablehlo.scatter"(%arg7, %84, %36) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0, 1, 2, 3], scatter_dims_to_operand_dims = [0, 1, 2, 3], index_vector_dim = 4>, unique_indices = false}> ({
    ^bb0(%arg24: tensor<f32>, %arg25: tensor<f32>):
      stablehlo.return %arg25 : tensor<f32>
    }) : (tensor<2x4x32x16xf32>, tensor<2x4x1x16x4xi64>, tensor<2x4x1x16xf32>) -> tensor<2x4x32x16xf32>
    %87 = stablehlo.convert %c_1 : (tensor<i64>) -> tensor<f64>
    %88 = stablehlo.divide %87, %45 : tensor<f64>
    %89 = stablehlo.ceil %88 : tensor<f64>
    %90 = stablehlo.convert %89 : (tensor<f64>) -> tensor<i64>
    %91 = stablehlo.reshape %90 : (tensor<i64>) -> tensor<1xi64>
    %92 = stablehlo.dynamic_iota %91, dim = 0 : (tensor<1xi64>) -> tensor<32xi64>
    %93 = stablehlo.multiply %92, %c_0 : tensor<32xi64>
    %94 = stablehlo.add %93, %c : tensor<32xi64>
    %95 = stablehlo.reshape %94 : (tensor<32xi64>) -> tensor<1x1x1x32xi64>
    %96 = stablehlo.reshape %arg3 : (tensor<2x1xi64>) -> tensor<2x1x1x1xi64>
    %97 = stablehlo.broadcast_in_dim %95, dims = [0, 1, 2, 3] : (tensor<1x1x1x32xi64>) -> tensor<2x1x1x32xi64>
    %98 = stablehlo.broadcast_in_dim %96, dims = [0, 1, 2, 3] : (tensor<2x1x1x1xi64>) -> tensor<2x1x1x32xi64>
    %99 = stablehlo.compare LE, %97, %98, SIGNED : (tensor<2x1x1x32xi64>, tensor<2x1x1x32xi64>) -> tensor<2x1x1x32xi1>
    %100 = stablehlo.broadcast_in_dim %99, dims = [0, 1, 2, 3] : (tensor<2x1x1x32xi1>) -> tensor<2x1x1x32xi1>
    %101 = stablehlo.broadcast_in_dim %cst_14, dims = [] : (tensor<f32>) -> tensor<2x1x1x32xf32>
    %102 = stablehlo.broadcast_in_dim %cst_15, dims = [] : (tensor<f32>) -> tensor<2x1x1x32xf32>
    %103 = stablehlo.select %100, %101, %102 : tensor<2x1x1x32xi1>, tensor<2x1x1x32xf32>
    %104 = stablehlo.convert %cst_20 : (tensor<1xf64>) -> tensor<1xf32>
    %105 = stablehlo.reshape %104 : (tensor<1xf32>) -> tensor<f32>
    %106 = stablehlo.broadcast_in_dim %105, dims = [] : (tensor<f32>) -> tensor<2x4x1x16xf32>
    %107 = stablehlo.multiply %32, %106 : tensor<2x4x1x16xf32>
    %108 = stablehlo.transpose %85, dims = [0, 1, 3, 2] : (tensor<2x4x32x16xf32>) -> tensor<2x4x16x32xf32>
    %109 = stablehlo.broadcast_in_dim %105, dims = [] : (tensor<f32>) -> tensor<2x4x16x32xf32>
    %110 = stablehlo.multiply %108, %109 : tensor<2x4x16x32xf32>
    %111 = stablehlo.reshape %107 : (tensor<2x4x1x16xf32>) -> tensor<8x1x16xf32>
    %112 = stablehlo.reshape %110 : (tensor<2x4x16x32xf32>) -> tensor<8x16x32xf32>
    %113 = stablehlo.broadcast_in_dim %112, dims = [0, 1, 2] : (tensor<8x16x32xf32>) -> tensor<8x16x32xf32>
    %114 = stablehlo.dot_general %111, %113, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<8x1x16xf32>, tensor<8x16x32xf32>) -> tensor<8x1x32xf32>
    %115 = stablehlo.reshape %114 : (tensor<8x1x32xf32>) -> tensor<2x4x1x32xf32>
    %116 = stablehlo.broadcast_in_dim %103, dims = [0, 1, 2, 3] : (tensor<2x1x1x32xf32>) -> tensor<2x4x1x32xf32>
    %117 = stablehlo.add %115, %116 : tensor<2x4x1x32xf32>
    %118 = stablehlo.reduce(%117 init: %cst_15) applies stablehlo.maximum across dimensions = [3] : (tensor<2x4x1x32xf32>, tensor<f32>) -> tensor<2x4x1xf32>
    %119 = stablehlo.reshape %118 : (tensor<2x4x1xf32>) -> tensor<2x4x1x1xf32>
    %120 = stablehlo.broadcast_in_dim %119, dims = [0, 1, 2, 3] : (tensor<2x4x1x1xf32>) -> tensor<2x4x1x32xf32>
    %121 = stablehlo.subtract %117, %120 : tensor<2x4x1x32xf32>
    %122 = stablehlo.exponential %121 : tensor<2x4x1x32xf32>
    %123 = stablehlo.reduce(%122 init: %cst_14) applies stablehlo.add across dimensions = [3] : (tensor<2x4x1x32xf32>, tensor<f32>) -> tensor<2x4x1xf32>
    %124 = stablehlo.reshape %123 : (tensor<2x4x1xf32>) -> tensor<2x4x1x1xf32>
    %125 = stablehlo.broadcast_in_dim %124, dims = [0, 1, 2, 3] : (tensor<2x4x1x1xf32>) -> tensor<2x4x1x32xf32>
    %126 = stablehlo.divide %122, %125 : tensor<2x4x1x32xf32>
    %127 = stablehlo.convert %cst_21 : tensor<1xf64>
    %128 = stablehlo.reshape %127 : (tensor<1xf64>) -> tensor<f64>
    %129 = stablehlo.convert %128 : (tensor<f64>) -> tensor<f32>
    %130 = stablehlo.broadcast_in_dim %129, dims = [] : (tensor<f32>) -> tensor<2x4x1x32xf32>
    %131 = stablehlo.compare EQ, %117, %130, FLOAT : (tensor<2x4x1x32xf32>, tensor<2x4x1x32xf32>) -> tensor<2x4x1x32xi1>
    %132 = stablehlo.not %131 : tensor<2x4x1x32xi1>
    %133 = stablehlo.reduce(%132 init: %c_16) applies stablehlo.or across dimensions = [3] : (tensor<2x4x1x32xi1>, tensor<i1>) -> tensor<2x4x1xi1>
    %134 = stablehlo.reshape %133 : (tensor<2x4x1xi1>) -> tensor<2x4x1x1xi1>
    %135 = stablehlo.not %134 : tensor<2x4x1x1xi1>
    %136 = stablehlo.broadcast_in_dim %135, dims = [0, 1, 2, 3] : (tensor<2x4x1x1xi1>) -> tensor<2x4x1x32xi1>
    %137 = stablehlo.broadcast_in_dim %cst, dims = [0, 1, 2, 3] : (tensor<2x4x1x32xf32>) -> tensor<2x4x1x32xf32>
    %138 = stablehlo.broadcast_in_dim %126, dims = [0, 1, 2, 3] : (tensor<2x4x1x32xf32>) -> tensor<2x4x1x32xf32>
    %139 = stablehlo.select %136, %137, %138 : tensor<2x4x1x32xi1>, tensor<2x4x1x32xf32>
    %140 = stablehlo.reshape %139 : (tensor<2x4x1x32xf32>) -> tensor<8x1x32xf32>
    %141 = stablehlo.reshape %86 : (tensor<2x4x32x16xf32>) -> tensor<8x32x16xf32>
    %142 = stablehlo.broadcast_in_dim %141, dims = [0, 1, 2] : (tensor<8x32x16xf32>) -> tensor<8x32x16xf32>
    %143 = stablehlo.dot_general %140, %142, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<8x1x32xf32>, tensor<8x32x16xf32>) -> tensor<8x1x16xf32>
    %144 = stablehlo.reshape %143 : (tensor<8x1x16xf32>) -> tensor<2x4x1x16xf32>
    %145 = stablehlo.transpose %144, dims = [2, 0, 1, 3] : (tensor<2x4x1x16xf32>) -> tensor<1x2x4x16xf32>
    %146 = stablehlo.transpose %145, dims = [1, 2, 0, 3] : (tensor<1x2x4x16xf32>) -> tensor<2x4x1x16xf32>
    %147 = stablehlo.transpose %146, dims = [0, 2, 1, 3] : (tensor<2x4x1x16xf32>) -> tensor<2x1x4x16xf32>
    %148 = stablehlo.reshape %147 : (tensor<2x1x4x16xf32>) -> tensor<2x1x64xf32>
    %149 = stablehlo.transpose %arg8, dims = [1, 0] : (tensor<64x64xf32>) -> tensor<64x64xf32>
    %150 = stablehlo.reshape %148 : (tensor<2x1x64xf32>) -> tensor<2x64xf32>
    %151 = stablehlo.dot_general %150, %149, contracting_dims = [1] x [0] : (tensor<2x64xf32>, tensor<64x64xf32>) -> tensor<2x64xf32>
    %152 = stablehlo.reshape %151 : (tensor<2x64xf32>) -> tensor<2x1x64xf32>
    %153 = stablehlo.add %4, %152 : tensor<2x1x64xf32>
    %154 = stablehlo.power %153, %7 : tensor<2x1x64xf32>
    %155 = stablehlo.reduce(%154 init: %cst_14) applies stablehlo.add across dimensions = [2] : (tensor<2x1x64xf32>, tensor<f32>) -> tensor<2x1xf32>
    %156 = stablehlo.reshape %155 : (tensor<2x1xf32>) -> tensor<2x1x1xf32>
    %157 = stablehlo.divide %156, %13 : tensor<2x1x1xf32>
    %158 = stablehlo.add %157, %17 : tensor<2x1x1xf32>
    %159 = stablehlo.rsqrt %158 : tensor<2x1x1xf32>
    %160 = stablehlo.broadcast_in_dim %159, dims = [0, 1, 2] : (tensor<2x1x1xf32>) -> tensor<2x1x64xf32>
    %161 = stablehlo.multiply %153, %160 : tensor<2x1x64xf32>
    %162 = stablehlo.broadcast_in_dim %arg9, dims = [2] : (tensor<64xf32>) -> tensor<2x1x64xf32>
    %163 = stablehlo.multiply %161, %162 : tensor<2x1x64xf32>
    %164 = stablehlo.transpose %arg10, dims = [1, 0] : (tensor<128x64xf32>) -> tensor<64x128xf32>
    %165 = stablehlo.reshape %163 : (tensor<2x1x64xf32>) -> tensor<2x64xf32>
    %166 = stablehlo.dot_general %165, %164, contracting_dims = [1] x [0] : (tensor<2x64xf32>, tensor<64x128xf32>) -> tensor<2x128xf32>
    %167 = stablehlo.reshape %166 : (tensor<2x128xf32>) -> tensor<2x1x128xf32>
    %168 = stablehlo.logistic %167 : tensor<2x1x128xf32>
    %169 = stablehlo.multiply %167, %168 : tensor<2x1x128xf32>
    %170 = stablehlo.transpose %arg11, dims = [1, 0] : (tensor<128x64xf32>) -> tensor<64x128xf32>
    %171 = stablehlo.dot_general %165, %170, contracting_dims = [1] x [0] : (tensor<2x64xf32>, tensor<64x128xf32>) -> tensor<2x128xf32>
    %172 = stablehlo.reshape %171 : (tensor<2x128xf32>) -> tensor<2x1x128xf32>
    %173 = stablehlo.multiply %169, %172 : tensor<2x1x128xf32>
    %174 = stablehlo.transpose %arg12, dims = [1, 0] : (tensor<64x128xf32>) -> tensor<128x64xf32>
    %175 = stablehlo.reshape %173 : (tensor<2x1x128xf32>) -> tensor<2x128xf32>
    %176 = stablehlo.dot_general %175, %174, contracting_dims = [1] x [0] : (tensor<2x128xf32>, tensor<128x64xf32>) -> tensor<2x64xf32>
    %177 = stablehlo.reshape %176 : (tensor<2x64xf32>) -> tensor<2x1x64xf32>
    %178 = stablehlo.add %153, %177 : tensor<2x1x64xf32>
    %179 = stablehlo.power %178, %7 : tensor<2x1x64xf32>
    %180 = stablehlo.reduce(%179 init: %cst_14) applies stablehlo.add across dimensions = [2] : (tensor<2x1x64xf32>, tensor<f32>) -> tensor<2x1xf32>
    %181 = stablehlo.reshape %180 : (tensor<2x1xf32>) -> tensor<2x1x1xf32>
    %182 = stablehlo.divide %181, %13 : tensor<2x1x1xf32>
    %183 = stablehlo.add %182, %17 : tensor<2x1x1xf32>
    %184 = stablehlo.rsqrt %183 : tensor<2x1x1xf32>
    %185 = stablehlo.broadcast_in_dim %184, dims = [0, 1, 2] : (tensor<2x1x1xf32>) -> tensor<2x1x64xf32>
    %186 = stablehlo.multiply %178, %185 : tensor<2x1x64xf32>
    %187 = stablehlo.broadcast_in_dim %arg13, dims = [2] : (tensor<64xf32>) -> tensor<2x1x64xf32>
    %188 = stablehlo.multiply %186, %187 : tensor<2x1x64xf32>
    %189 = stablehlo.transpose %arg14, dims = [1, 0] : (tensor<192x64xf32>) -> tensor<64x192xf32>
    %190 = stablehlo.reshape %188 : (tensor<2x1x64xf32>) -> tensor<2x64xf32>
    %191 = stablehlo.dot_general %190, %189, contracting_dims = [1] x [0] : (tensor<2x64xf32>, tensor<64x192xf32>) -> tensor<2x192xf32>
    %192 = stablehlo.reshape %191 : (tensor<2x192xf32>) -> tensor<2x1x192xf32>
    %193 = stablehlo.slice %192 [0:2, 0:1, 0:64] : (tensor<2x1x192xf32>) -> tensor<2x1x64xf32>
    %194 = stablehlo.slice %192 [0:2, 0:1, 64:128] : (tensor<2x1x192xf32>) -> tensor<2x1x64xf32>
    %195 = stablehlo.slice %192 [0:2, 0:1, 128:192] : (tensor<2x1x192xf32>) -> tensor<2x1x64xf32>
    %196 = stablehlo.reshape %193 : (tensor<2x1x64xf32>) -> tensor<2x1x4x16xf32>
    %197 = stablehlo.transpose %196, dims = [0, 2, 1, 3] : (tensor<2x1x4x16xf32>) -> tensor<2x4x1x16xf32>
    %198 = stablehlo.reshape %194 : (tensor<2x1x64xf32>) -> tensor<2x1x4x16xf32>
    %199 = stablehlo.transpose %198, dims = [0, 2, 1, 3] : (tensor<2x1x4x16xf32>) -> tensor<2x4x1x16xf32>
    %200 = stablehlo.reshape %195 : (tensor<2x1x64xf32>) -> tensor<2x1x4x16xf32>
    %201 = stablehlo.transpose %200, dims = [0, 2, 1, 3] : (tensor<2x1x4x16xf32>) -> tensor<2x4x1x16xf32>
    %202 = "stablehlo.scatter"(%arg15, %84, %199) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0, 1, 2, 3], scatter_dims_to_operand_dims = [0, 1, 2, 3], index_vector_dim = 4>, unique_indices = false}> ({
    ^bb0(%arg24: tensor<f32>, %arg25: tensor<f32>):
      stablehlo.return %arg25 : tensor<f32>
    }) : (tensor<2x4x32x16xf32>, tensor<2x4x1x16x4xi64>, tensor<2x4x1x16xf32>) -> tensor<2x4x32x16xf32>
    %203 = "stablehlo.scatter"(%arg16, %84, %201) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0, 1, 2, 3], scatter_dims_to_operand_dims = [0, 1, 2, 3], index_vector_dim = 4>, unique_indices = false}> ({
    ^bb0(%arg24: tensor<f32>, %arg25: tensor<f32>):
      stablehlo.return %arg25 : tensor<f32>
    }) : (tensor<2x4x32x16xf32>, tensor<2x4x1x16x4xi64>, tensor<2x4x1x16xf32>) -> tensor<2x4x32x16xf32>
    %204 = stablehlo.multiply %197, %106 : tensor<2x4x1x16xf32>
    %205 = stablehlo.transpose %202, dims = [0, 1, 3, 2] : (tensor<2x4x32x16xf32>) -> tensor<2x4x16x32xf32>
    %206 = stablehlo.multiply %205, %109 : tensor<2x4x16x32xf32>
    %207 = stablehlo.reshape %204 : (tensor<2x4x1x16xf32>) -> tensor<8x1x16xf32>
    %208 = stablehlo.reshape %206 : (tensor<2x4x16x32xf32>) -> tensor<8x16x32xf32>
    %209 = stablehlo.broadcast_in_dim %208, dims = [0, 1, 2] : (tensor<8x16x32xf32>) -> tensor<8x16x32xf32>
    %210 = stablehlo.dot_general %207, %209, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<8x1x16xf32>, tensor<8x16x32xf32>) -> tensor<8x1x32xf32>
    %211 = stablehlo.reshape %210 : (tensor<8x1x32xf32>) -> tensor<2x4x1x32xf32>
    %212 = stablehlo.add %211, %116 : tensor<2x4x1x32xf32>
    %213 = stablehlo.reduce(%212 init: %cst_15) applies stablehlo.maximum across dimensions = [3] : (tensor<2x4x1x32xf32>, tensor<f32>) -> tensor<2x4x1xf32>
    %214 = stablehlo.reshape %213 : (tensor<2x4x1xf32>) -> tensor<2x4x1x1xf32>
    %215 = stablehlo.broadcast_in_dim %214, dims = [0, 1, 2, 3] : (tensor<2x4x1x1xf32>) -> tensor<2x4x1x32xf32>
    %216 = stablehlo.subtract %212, %215 : tensor<2x4x1x32xf32>
    %217 = stablehlo.exponential %216 : tensor<2x4x1x32xf32>
    %218 = stablehlo.reduce(%217 init: %cst_14) applies stablehlo.add across dimensions = [3] : (tensor<2x4x1x32xf32>, tensor<f32>) -> tensor<2x4x1xf32>
    %219 = stablehlo.reshape %218 : (tensor<2x4x1xf32>) -> tensor<2x4x1x1xf32>
    %220 = stablehlo.broadcast_in_dim %219, dims = [0, 1, 2, 3] : (tensor<2x4x1x1xf32>) -> tensor<2x4x1x32xf32>
    %221 = stablehlo.divide %217, %220 : tensor<2x4x1x32xf32>
    %222 = stablehlo.compare EQ, %212, %130, FLOAT : (tensor<2x4x1x32xf32>, tensor<2x4x1x32xf32>) -> tensor<2x4x1x32xi1>
    %223 = stablehlo.not %222 : tensor<2x4x1x32xi1>
    %224 = stablehlo.reduce(%223 init: %c_16) applies stablehlo.or across dimensions = [3] : (tensor<2x4x1x32xi1>, tensor<i1>) -> tensor<2x4x1xi1>
    %225 = stablehlo.reshape %224 : (tensor<2x4x1xi1>) -> tensor<2x4x1x1xi1>
    %226 = stablehlo.not %225 : tensor<2x4x1x1xi1>
    %227 = stablehlo.broadcast_in_dim %226, dims = [0, 1, 2, 3] : (tensor<2x4x1x1xi1>) -> tensor<2x4x1x32xi1>
    %228 = stablehlo.broadcast_in_dim %221, dims = [0, 1, 2, 3] : (tensor<2x4x1x32xf32>) -> tensor<2x4x1x32xf32>
    %229 = stablehlo.select %227, %137, %228 : tensor<2x4x1x32xi1>, tensor<2x4x1x32xf32>
    %230 = stablehlo.reshape %229 : (tensor<2x4x1x32xf32>) -> tensor<8x1x32xf32>
    %231 = stablehlo.reshape %203 : (tensor<2x4x32x16xf32>) -> tensor<8x32x16xf32>
    %232 = stablehlo.broadcast_in_dim %231, dims = [0, 1, 2] : (tensor<8x32x16xf32>) -> tensor<8x32x16xf32>
    %233 = stablehlo.dot_general %230, %232, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<8x1x32xf32>, tensor<8x32x16xf32>) -> tensor<8x1x16xf32>
    %234 = stablehlo.reshape %233 : (tensor<8x1x16xf32>) -> tensor<2x4x1x16xf32>
    %235 = stablehlo.transpose %234, dims = [2, 0, 1, 3] : (tensor<2x4x1x16xf32>) -> tensor<1x2x4x16xf32>
    %236 = stablehlo.transpose %235, dims = [1, 2, 0, 3] : (tensor<1x2x4x16xf32>) -> tensor<2x4x1x16xf32>
    %237 = stablehlo.transpose %236, dims = [0, 2, 1, 3] : (tensor<2x4x1x16xf32>) -> tensor<2x1x4x16xf32>
    %238 = stablehlo.reshape %237 : (tensor<2x1x4x16xf32>) -> tensor<2x1x64xf32>
    %239 = stablehlo.transpose %arg17, dims = [1, 0] : (tensor<64x64xf32>) -> tensor<64x64xf32>
    %240 = stablehlo.reshape %238 : (tensor<2x1x64xf32>) -> tensor<2x64xf32>
    %241 = stablehlo.dot_general %240, %239, contracting_dims = [1] x [0] : (tensor<2x64xf32>, tensor<64x64xf32>) -> tensor<2x64xf32>
    %242 = stablehlo.reshape %241 : (tensor<2x64xf32>) -> tensor<2x1x64xf32>
    %243 = stablehlo.add %178, %242 : tensor<2x1x64xf32>
    %244 = stablehlo.power %243, %7 : tensor<2x1x64xf32>
    %245 = stablehlo.reduce(%244 init: %cst_14) applies stablehlo.add across dimensions = [2] : (tensor<2x1x64xf32>, tensor<f32>) -> tensor<2x1xf32>
    %246 = stablehlo.reshape %245 : (tensor<2x1xf32>) -> tensor<2x1x1xf32>
    %247 = stablehlo.divide %246, %13 : tensor<2x1x1xf32>
    %248 = stablehlo.add %247, %17 : tensor<2x1x1xf32>
    %249 = stablehlo.rsqrt %248 : tensor<2x1x1xf32>
    %250 = stablehlo.broadcast_in_dim %249, dims = [0, 1, 2] : (tensor<2x1x1xf32>) -> tensor<2x1x64xf32>
    %251 = stablehlo.multiply %243, %250 : tensor<2x1x64xf32>
    %252 = stablehlo.broadcast_in_dim %arg18, dims = [2] : (tensor<64xf32>) -> tensor<2x1x64xf32>
    %253 = stablehlo.multiply %251, %252 : tensor<2x1x64xf32>
    %254 = stablehlo.transpose %arg19, dims = [1, 0] : (tensor<128x64xf32>) -> tensor<64x128xf32>
    %255 = stablehlo.reshape %253 : (tensor<2x1x64xf32>) -> tensor<2x64xf32>
    %256 = stablehlo.dot_general %255, %254, contracting_dims = [1] x [0] : (tensor<2x64xf32>, tensor<64x128xf32>) -> tensor<2x128xf32>
    %257 = stablehlo.reshape %256 : (tensor<2x128xf32>) -> tensor<2x1x128xf32>
    %258 = stablehlo.logistic %257 : tensor<2x1x128xf32>
    %259 = stablehlo.multiply %257, %258 : tensor<2x1x128xf32>
    %260 = stablehlo.transpose %arg20, dims = [1, 0] : (tensor<128x64xf32>) -> tensor<64x128xf32>
    %261 = stablehlo.dot_general %255, %260, contracting_dims = [1] x [0] : (tensor<2x64xf32>, tensor<64x128xf32>) -> tensor<2x128xf32>
    %262 = stablehlo.reshape %261 : (tensor<2x128xf32>) -> tensor<2x1x128xf32>
    %263 = stablehlo.multiply %259, %262 : tensor<2x1x128xf32>
    %264 = stablehlo.transpose %arg21, dims = [1, 0] : (tensor<64x128xf32>) -> tensor<128x64xf32>
    %265 = stablehlo.reshape %263 : (tensor<2x1x128xf32>) -> tensor<2x128xf32>
    %266 = stablehlo.dot_general %265, %264, contracting_dims = [1] x [0] : (tensor<2x128xf32>, tensor<128x64xf32>) -> tensor<2x64xf32>
    %267 = stablehlo.reshape %266 : (tensor<2x64xf32>) -> tensor<2x1x64xf32>
    %268 = stablehlo.add %243, %267 : tensor<2x1x64xf32>
    %269 = stablehlo.power %268, %7 : tensor<2x1x64xf32>
    %270 = stablehlo.reduce(%269 init: %cst_14) applies stablehlo.add across dimensions = [2] : (tensor<2x1x64xf32>, tensor<f32>) -> tensor<2x1xf32>
    %271 = stablehlo.reshape %270 : (tensor<2x1xf32>) -> tensor<2x1x1xf32>
    %272 = stablehlo.divide %271, %13 : tensor<2x1x1xf32>
    %273 = stablehlo.add %272, %17 : tensor<2x1x1xf32>
    %274 = stablehlo.rsqrt %273 : tensor<2x1x1xf32>
    %275 = stablehlo.broadcast_in_dim %274, dims = [0, 1, 2] : (tensor<2x1x1xf32>) -> tensor<2x1x64xf32>
    %276 = stablehlo.multiply %268, %275 : tensor<2x1x64xf32>
    %277 = stablehlo.broadcast_in_dim %arg22, dims = [2] : (tensor<64xf32>) -> tensor<2x1x64xf32>
    %278 = stablehlo.multiply %276, %277 : tensor<2x1x64xf32>
    %279 = stablehlo.transpose %arg23, dims = [1, 0] : (tensor<128x64xf32>) -> tensor<64x128xf32>
    %280 = stablehlo.reshape %278 : (tensor<2x1x64xf32>) -> tensor<2x64xf32>
    %281 = stablehlo.dot_general %280, %279, contracting_dims = [1] x [0] : (tensor<2x64xf32>, tensor<64x128xf32>) -> tensor<2x128xf32>
    %282 = stablehlo.reshape %281 : (tensor<2x128xf32>) -> tensor<2x1x128xf32>
    return %85, %86, %202, %203, %282 : tensor<2x4x32x16xf32>, tensor<2x4x32x16xf32>, tensor<2x4x32x16xf32>, tensor<2x4x32x16xf32>, tensor<2x1x128xf32>
  }
}
