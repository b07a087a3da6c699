// summary: @main(tensor<8x2xf32>, tensor<i64>) -> (tensor<8x2xf32>, tensor<2xf32>) | ops: arith.constant=3 stablehlo.add=4 stablehlo.all_gather=1 stablehlo.all_reduce=2 stablehlo.all_to_all=1 stablehlo.broadcast_in_dim=4 stablehlo.constant=1 stablehlo.convert=4 stablehlo.maximum=1 stablehlo.multiply=2 stablehlo.reduce=1 stablehlo.reduce_scatter=1 stablehlo.reshape=3 stablehlo.return=3 stablehlo.tanh=1
// graph 0 of 1
module @spmd_program {
  func.func private @piece_0(%arg0: tensor<8x2xf32>, %arg1: tensor<i64>) -> tensor<8x2xf32> {
    %cst = arith.constant dense<2> : tensor<1xi64>
    %0 = stablehlo.convert %cst : (tensor<1xi64>) -> tensor<1xf32>
    %1 = stablehlo.reshape %0 : (tensor<1xf32>) -> tensor<f32>
    %2 = stablehlo.broadcast_in_dim %1, dims = [] : (tensor<f32>) -> tensor<8x2xf32>
    %3 = stablehlo.multiply %arg0, %2 : tensor<8x2xf32>
    %4 = stablehlo.convert %arg1 : (tensor<i64>) -> tensor<f32>
    %5 = stablehlo.broadcast_in_dim %4, dims = [] : (tensor<f32>) -> tensor<8x2xf32>
    %6 = stablehlo.add %3, %5 : tensor<8x2xf32>
    return %6 : tensor<8x2xf32>
  }
  func.func private @piece_1(%arg0: tensor<16x2xf32>) -> tensor<16x2xf32> {
    %0 = stablehlo.tanh %arg0 : tensor<16x2xf32>
    return %0 : tensor<16x2xf32>
  }
  func.func private @piece_2(%arg0: tensor<8x2xf32>) -> tensor<8x2xf32> {
    %cst = arith.constant dense<3> : tensor<1xi64>
    %0 = stablehlo.convert %cst : (tensor<1xi64>) -> tensor<1xf32>
    %1 = stablehlo.reshape %0 : (tensor<1xf32>) -> tensor<f32>
    %2 = stablehlo.broadcast_in_dim %1, dims = [] : (tensor<f32>) -> tensor<8x2xf32>
    %3 = stablehlo.multiply %arg0, %2 : tensor<8x2xf32>
    return %3 : tensor<8x2xf32>
  }
  func.func private @piece_3(%arg0: tensor<8x2xf32>, %arg1: tensor<8x2xf32>) -> (tensor<8x2xf32>, tensor<2xf32>) {
    %cst = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %cst_0 = arith.constant dense<1> : tensor<1xi64>
    %0 = stablehlo.convert %cst_0 : (tensor<1xi64>) -> tensor<1xf32>
    %1 = stablehlo.reshape %0 : (tensor<1xf32>) -> tensor<f32>
    %2 = stablehlo.broadcast_in_dim %1, dims = [] : (tensor<f32>) -> tensor<8x2xf32>
    %3 = stablehlo.add %arg0, %2 : tensor<8x2xf32>
    %4 = stablehlo.reduce(%arg1 init: %cst) applies stablehlo.maximum across dimensions = [0] : (tensor<8x2xf32>, tensor<f32>) -> tensor<2xf32>
    return %3, %4 : tensor<8x2xf32>, tensor<2xf32>
  }
  func.func @main(%arg0: tensor<8x2xf32>, %arg1: tensor<i64>) -> (tensor<8x2xf32>, tensor<2xf32>) {
    %0 = call @piece_0(%arg0, %arg1) : (tensor<8x2xf32>, tensor<i64>) -> tensor<8x2xf32>
    %1 = "stablehlo.all_reduce"(%0) <{channel_handle = #stablehlo.channel_handle<handle = 2, type = 1>, replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>, use_global_device_ids}> ({
    ^bb0(%arg2: tensor<f32>, %arg3: tensor<f32>):
      %9 = stablehlo.add %arg2, %arg3 : tensor<f32>
      stablehlo.return %9 : tensor<f32>
    }) : (tensor<8x2xf32>) -> tensor<8x2xf32>
    %2 = "stablehlo.all_gather"(%1) <{all_gather_dim = 0 : i64, channel_handle = #stablehlo.channel_handle<handle = 2, type = 1>, replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>, use_global_device_ids}> : (tensor<8x2xf32>) -> tensor<16x2xf32>
    %3 = call @piece_1(%2) : (tensor<16x2xf32>) -> tensor<16x2xf32>
    %4 = "stablehlo.reduce_scatter"(%3) <{channel_handle = #stablehlo.channel_handle<handle = 2, type = 1>, replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>, scatter_dimension = 0 : i64, use_global_device_ids}> ({
    ^bb0(%arg2: tensor<f32>, %arg3: tensor<f32>):
      %9 = stablehlo.add %arg2, %arg3 : tensor<f32>
      stablehlo.return %9 : tensor<f32>
    }) : (tensor<16x2xf32>) -> tensor<8x2xf32>
    %5 = call @piece_2(%4) : (tensor<8x2xf32>) -> tensor<8x2xf32>
    %6 = "stablehlo.all_to_all"(%5) <{channel_handle = #stablehlo.channel_handle<handle = 2, type = 1>, concat_dimension = 0 : i64, replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>, split_count = 2 : i64, split_dimension = 0 : i64}> : (tensor<8x2xf32>) -> tensor<8x2xf32>
    %7:2 = call @piece_3(%6, %1) : (tensor<8x2xf32>, tensor<8x2xf32>) -> (tensor<8x2xf32>, tensor<2xf32>)
    %8 = "stablehlo.all_reduce"(%7#1) <{channel_handle = #stablehlo.channel_handle<handle = 2, type = 1>, replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>, use_global_device_ids}> ({
    ^bb0(%arg2: tensor<f32>, %arg3: tensor<f32>):
      %9 = stablehlo.maximum %arg2, %arg3 : tensor<f32>
      stablehlo.return %9 : tensor<f32>
    }) : (tensor<2xf32>) -> tensor<2xf32>
    return %7#0, %8 : tensor<8x2xf32>, tensor<2xf32>
  }
}
