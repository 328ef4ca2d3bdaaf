// The CUDA twins of the general network's layer operations (include/cnn/layer_ops.hpp): same names,
// same argument order, same semantics (backward ops ACCUMULATE into parameter gradients and
// OVERWRITE activation gradients), device pointers, plus the stream to run on. Each returns once its
// kernels are queued. Scratch for split reductions comes from the stream-ordered allocator, so the
// twins may be captured in a CUDA graph. Defined in layer_ops_conv.cu (conv2d), relu.cu, maxpool.cu, avgpool.cu, dropout.cu,
// bn.cu and conv_relu_pool.cu (the conv + ReLU + pool one).
//
// Below the twins: the planned forms the cuda backend's layer ops (kernels/layers/conv.cu, fc.cu) launch inside its
// captured step, with the launch shape fixed once per batch size, a preallocated workspace, and the
// neighbouring ReLU folded in (into the forward's store, or as a mask on the input gradient). The
// plans are made in layer_plans.cu; the conv forms are in layer_ops_conv.cu, the fc forms in
// layer_ops_fc.cu, maxpool_backward_masked in maxpool.cu, the conv + ReLU + pool forms in
// conv_relu_pool.cu.
//
// Every sum runs in an order fixed by the plan (shape and GPU model): no float atomics, so a run on
// the same GPU repeats bit for bit. The fully connected twins (fc_forward / fc_backward in
// cuda_ops.hpp) take the same matrix product for any output count other than the seed's 10.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cnn/layer_ops.hpp"
#include "cnn/model.hpp"
#include "ops/implicit_gemm.cuh"
#include "ops/sweep_plan.hpp"

namespace cnn::cuda {

// ---- twins --------------------------------------------------------------------------------------
void conv2d_forward(float* out /*[n,F,OH,OW]*/, const float* in /*[n,C,H,W]*/, const float* weight /*[F,C,K,K]*/,
                    const float* bias /*[F]*/, std::int64_t n, const ConvShape& shape, cudaStream_t stream);
void conv2d_backward(float* grad_in /*[n,C,H,W] or null*/, float* grad_weight /*[F,C,K,K]*/,
                     float* grad_bias /*[F]*/, const float* grad_out /*[n,F,OH,OW]*/, const float* in /*[n,C,H,W]*/,
                     const float* weight /*[F,C,K,K]*/, std::int64_t n, const ConvShape& shape, cudaStream_t stream);
void relu_forward(float* out, const float* in, std::int64_t count, cudaStream_t stream);
void relu_backward(float* grad_in, const float* grad_out, const float* out, std::int64_t count, cudaStream_t stream);
void maxpool_forward(float* out /*[n,C,OH,OW]*/, std::int32_t* argmax /*[n,C,OH,OW]*/, const float* in /*[n,C,H,W]*/,
                     std::int64_t n, const PoolShape& shape, cudaStream_t stream);
void maxpool_backward(float* grad_in /*[n,C,H,W]*/, const float* grad_out /*[n,C,OH,OW]*/,
                      const std::int32_t* argmax /*[n,C,OH,OW]*/, std::int64_t n, const PoolShape& shape,
                      cudaStream_t stream);
void avgpool_forward(float* out /*[n,C,OH,OW]*/, const float* in /*[n,C,H,W]*/, std::int64_t n,
                     const AvgPoolShape& shape, cudaStream_t stream);
void avgpool_backward(float* grad_in /*[n,C,H,W]*/, const float* grad_out /*[n,C,OH,OW]*/, std::int64_t n,
                      const AvgPoolShape& shape, cudaStream_t stream);
// Dropout's twins read the MaskOrigin from device memory (`origin`, written by set_mask_origin), so a
// captured step replays with the next step's masks.
void dropout_forward(float* out, const float* in, std::int64_t n, std::int64_t size, const DropoutDraw& draw,
                     const MaskOrigin* origin, cudaStream_t stream);
void dropout_backward(float* grad_in, const float* grad_out, std::int64_t n, std::int64_t size,
                      const DropoutDraw& draw, const MaskOrigin* origin, cudaStream_t stream);
// *origin = value, in stream order (a one-thread kernel: its argument is copied at the launch, so the
// host never waits and may overwrite `value` at once).
void set_mask_origin(MaskOrigin* origin, const MaskOrigin& value, cudaStream_t stream);
// Batch norm's twins (bn.cu), NCHW (after fc: spatial 1), every pointer in device memory. The sums
// are in double, each channel's in an order fixed by (n, channels, spatial) and the GPU model: split
// into per-block partial sums, each a tree in shared memory, then added in block order, with no
// atomics. Where the CPU twin takes the count of values per channel as an argument, the device twin
// reads it from device memory: after an exchange of the sums over ranks (statistics_exchange.hpp) the
// global count is known on the device only, and a captured step replays with the count of its step.
// bn_channel_sums also writes sums[2C] = n * spatial, the count that the exchange adds up with them.
void bn_channel_sums(double* sums /*[2C+1]*/, const float* x /*[n,C,spatial]*/, std::int64_t n, std::int64_t channels,
                     std::int64_t spatial, cudaStream_t stream);
// The count is sums[2C].
void bn_statistics(float* mean /*[C]*/, float* inv_std /*[C]*/, const double* sums /*[2C+1]*/, std::int64_t channels,
                   float* running /*[2C] or null*/, float momentum, cudaStream_t stream);
void bn_running_statistics(float* mean, float* inv_std, const float* running /*[2C]*/, std::int64_t channels,
                           cudaStream_t stream);
void bn_normalize(float* y, const float* x, const float* mean, const float* inv_std, const float* gamma,
                  const float* beta, std::int64_t n, std::int64_t channels, std::int64_t spatial, cudaStream_t stream);
void bn_gradient_sums(double* sums /*[2C]*/, const float* grad_y, const float* x, const float* mean,
                      const float* inv_std, std::int64_t n, std::int64_t channels, std::int64_t spatial,
                      cudaStream_t stream);
// count: device memory, [1] (the forward's sums[2C]).
void bn_input_gradient(float* grad_x, const float* grad_y, const float* x, const float* mean, const float* inv_std,
                       const float* gamma, const double* sums /*[2C]*/, const double* count, std::int64_t n,
                       std::int64_t channels, std::int64_t spatial, cudaStream_t stream);

// ---- planned forms, for the cuda backend's layer ops ----------------------------------------------
// The three products of a convolution or fully connected layer over a batch of n.
// A convolution's input gradient goes one of two ways (dgrad_by_columns):
//   by columns: dcol[(c,i,j), (s,oy,ox)] = sum_f weight[f,(c,i,j)] * grad_out[s,f,oy,ox], a product
//     whose loaders only add offsets, then a gather (col2im) sums each input pixel's taps in (i,j)
//     order. Costs column_floats of workspace; the usual case.
//   direct: the product over k = (f,i,j) decodes each tap and tests its bounds per element, with
//     no workspace beyond split-K. Taken when the columns would exceed max_column_floats.
struct LayerPlans {
  GemmPlan forward, dgrad, wgrad;
  bool dgrad_by_columns = false;
  std::int64_t column_floats = 0;  // C*KH*KW x n*OH*OW when dgrad_by_columns
  // A convolution in tf32 or bf16: all three products are the staged forms below, and the op keeps
  // these 32-bit words for the staged tensors (StagedBuffers).
  bool staged = false;
  std::int64_t staged_input_words = 0, staged_grad_words = 0, staged_weight_words = 0;
  // A staged conv + ReLU with a 2x2/2 max-pool after it: the forward that pools in its store
  // (conv2d_forward_staged_pooled, plan_conv_pooled); m == 0: none planned.
  GemmPlan pooled_forward{};
  std::int64_t workspace_floats() const;
};
constexpr std::int64_t kMaxColumnFloats = std::int64_t{1} << 26;  // 256 MiB
// `precision` is every product's (gemm_plan.hpp); the col2im gather of the input gradient by columns
// adds in fp32 whatever it is. `wgmma`: the GPU runs the warpgroup product (wgmma_available), which the
// staged forward and input gradient may then take (plan_staged_forward, plan_input_gradient).
LayerPlans plan_conv(const ConvShape& shape, std::int64_t n, int multiprocessors,
                     std::int64_t max_column_floats = kMaxColumnFloats, Precision precision = Precision::kFp32,
                     bool wgmma = false);
// The forward of a staged conv (tf32, bf16) that pools its ReLU's output 2x2/2 in its store
// (plan_pool_windows): LayerPlans::pooled_forward.
GemmPlan plan_conv_pooled(const ConvShape& shape, std::int64_t n, int multiprocessors, Precision precision,
                          bool wgmma = false);
LayerPlans plan_fc(std::int64_t in_features, std::int64_t out_features, std::int64_t n, int multiprocessors,
                   Precision precision = Precision::kFp32);

// out = conv(in) + bias, then max(0, .) when `relu`.
void conv2d_forward_planned(const GemmPlan& plan, float* out, const float* in, const float* weight, const float* bias,
                            std::int64_t n, const ConvShape& shape, bool relu, float* workspace, cudaStream_t stream);
// grad_in = the input gradient; where relu_out is given (the conv's input, itself a ReLU's output),
// zero wherever relu_out <= 0: the ReLU's backward folded in. By columns or direct, as planned.
void conv2d_backward_data(const LayerPlans& plans, float* grad_in, const float* grad_out, const float* weight,
                          const float* relu_out, std::int64_t n, const ConvShape& shape, float* workspace,
                          cudaStream_t stream);
// grad_weight, grad_bias = (accumulate ? += : =) the batch's sums.
void conv2d_backward_weights(const GemmPlan& plan, float* grad_weight, float* grad_bias, const float* grad_out,
                             const float* in, std::int64_t n, const ConvShape& shape, bool accumulate,
                             float* workspace, cudaStream_t stream);

void fc_forward_planned(const GemmPlan& plan, float* out, const float* in, const float* weight, const float* bias,
                        std::int64_t n, std::int64_t in_features, std::int64_t out_features, bool relu,
                        float* workspace, cudaStream_t stream);
void fc_backward_data(const GemmPlan& plan, float* grad_in, const float* grad_out, const float* weight,
                      const float* relu_out, std::int64_t n, std::int64_t in_features, std::int64_t out_features,
                      float* workspace, cudaStream_t stream);
void fc_backward_weights(const GemmPlan& plan, float* grad_weight, float* grad_bias, const float* grad_out,
                         const float* in, std::int64_t n, std::int64_t in_features, std::int64_t out_features,
                         bool accumulate, float* workspace, cudaStream_t stream);

// A staged tensor of a conv that a neighbouring op fills directly, so that the conv skips a staging
// pass: its output gradient ([n,OH,OW,Fp] words, StagedBuffers::output_grad), which the op after it
// writes in its backward (conv2d_stage_backward skipped), or its input ([n,H,W,Cp],
// StagedBuffers::input), which the op before it writes in its forward beside its own output (the
// forward's stage_nhwc skipped). The words are those the staging would write, bit for bit; words
// null: none. pixels: of a sample in that layout (OH*OW or H*W; 1 of an fc layer run as a 1x1 conv),
// for a writer whose own tensor is that one flattened (a conv's output as an fc layer's input,
// fc_softmax's input gradient as a conv's output gradient).
struct StagedTensor {
  std::uint32_t* words = nullptr;
  Precision precision = Precision::kFp32;
  int channels_padded = 0;
  int pixels = 0;
};
// A product's output left as the partial sums of its k splits, [splits][columns][rows] floats (the
// product's M = rows, N = columns; GemmPlan::splits from 2 to kMaxSplitsAddedInOrder), for the op that
// reads that output to add in split order from 0, as the product's sum kernel (gemm_finalize_kernel)
// adds them: the same bits, one launch fewer. A convolution's input gradient, unmasked, read by the
// max-pool before the conv: rows = n*H*W (s, h, w), columns = C. sums null: none.
struct SplitPartials {
  const float* sums = nullptr;
  int splits = 0;
  int rows = 0, columns = 0;
};

// `t` (words given) holds samples of sample_size elements each, an NCHW tensor's flattened sample as
// [pixels, sample_size / pixels channels]: pixels divides it, and the channels pad to channels_padded.
bool holds_staged_samples(const StagedTensor& t, std::int64_t sample_size);

// The convolution's tensor-core forms (tf32, bf16; conv_tensor_core.cu). The element loaders above
// spend a dozen instructions on each operand element (its window decoded, bounds tested, loaded
// alone, rounded); these read 16-byte chunks of 4 or 8 channels instead, from NHWC copies in the
// precision's format with the channels padded to whole chunks, which the op stages before the
// products: the forward stages its input (kept for the weight gradient); the weights are staged in
// both orders, (i,j,c) for the forward and (i,j,f) for the input gradient, once a step (they change
// only in the update); the backward stages the output gradient before the two products that read it.
struct StagedBuffers {
  std::uint32_t* input = nullptr;        // [n,H,W,Cp], LayerPlans::staged_input_words
  std::uint32_t* output_grad = nullptr;  // [n,OH,OW,Fp], staged_grad_words
  std::uint32_t* weight = nullptr;       // [F][KK*Cp] then [C][KK*Fp], staged_weight_words
};
// Stages the weights in both orders into staged.weight. They change only in the update, so a training
// step stages them at its start, off the main chain (ProductOp::start_step); the forwards below stage
// them themselves unless told so (weights_staged).
void conv2d_stage_weights(const LayerPlans& plans, const float* weight, const ConvShape& shape,
                          const StagedBuffers& staged, cudaStream_t stream);
// input_staged: the op before has written staged.input already (StagedTensor); else it is staged here.
// weights_staged: conv2d_stage_weights has run for these weights (in stream order); else it runs here.
// out_staged: where words, the staged input of the op after (a staged conv, or an fc layer run as one),
// written by the store beside `out` (StagedScatter, staged_layout.cuh).
void conv2d_forward_staged(const LayerPlans& plans, float* out, const StagedTensor& out_staged, const float* in,
                           const float* weight, const float* bias, std::int64_t n, const ConvShape& shape, bool relu,
                           const StagedBuffers& staged, bool input_staged, bool weights_staged, float* workspace,
                           cudaStream_t stream);
// Stages grad_out for the two products below (after the step's conv2d_forward_staged).
void conv2d_stage_backward(const LayerPlans& plans, const float* grad_out, std::int64_t n, const ConvShape& shape,
                           const StagedBuffers& staged, cudaStream_t stream);
// leave_splits: the input gradient is left in `workspace` as conv_input_grad_partials describes it, for
// the op before to add, and grad_in is not written (the plan must offer them).
void conv2d_backward_data_staged(const LayerPlans& plans, float* grad_in, const float* relu_out, std::int64_t n,
                                 const ConvShape& shape, const StagedBuffers& staged, float* workspace,
                                 bool leave_splits, cudaStream_t stream);
// Where the staged input gradient's plan splits k (2 to kMaxSplitsAddedInOrder ways, not over TMA boxes),
// its split partials in `workspace` (SplitPartials); else none.
SplitPartials conv_input_grad_partials(const LayerPlans& plans, const float* workspace, std::int64_t n,
                                       const ConvShape& shape);
void conv2d_backward_weights_staged(const LayerPlans& plans, float* grad_weight, float* grad_bias, std::int64_t n,
                                    const ConvShape& shape, bool accumulate, const StagedBuffers& staged,
                                    float* workspace, cudaStream_t stream);
// The channels of a staged tensor: c rounded up to whole 16-byte chunks of the precision.
int staged_channels(int c, Precision precision);

// The output of a conv + ReLU + 2x2/2 max-pool whose pool runs in the conv's store: the pool's
// output [n,F,PH,PW] and argmax (in the conv's output plane), and the staged input of the conv after
// the pool ([n,PH,PW,Fp] words) where out_staged.words. out null: none.
struct PooledOutput {
  float* out = nullptr;
  std::int32_t* argmax = nullptr;
  StagedTensor out_staged;
};
// conv2d_forward_staged with relu, then maxpool_forward_staged of 2x2/2, in one product whose rows
// are the pool windows' outputs (plans.pooled_forward): the pool's output, argmax and staged words
// those two write, bit for bit, where the forward's plan does not split k (the pooled product never
// does). The conv's own output is not written, nor computed where no window covers it.
void conv2d_forward_staged_pooled(const LayerPlans& plans, const PooledOutput& pooled, const float* in,
                                  const float* weight, const float* bias, std::int64_t n, const ConvShape& shape,
                                  const StagedBuffers& staged, bool input_staged, bool weights_staged,
                                  cudaStream_t stream);

// fc_forward (O = 10), softmax_cross_entropy_per_sample and fc_backward's input gradient in one
// kernel, for the last fc layer and its loss (fc_softmax.cu, the fc_softmax op): per sample, the
// logits (where `logits`), the loss and hit, dL/dlogits (where `grad_logits`, for the weight
// gradient's product) and the input gradient, zeroed where in <= 0 when
// mask_relu (`in` is a ReLU's output): into `grad_in`, or where grad_in_staged.words, into that
// staged output gradient of the op before instead (StagedTensor above: NHWC [n, pixels, Cp] words,
// the input being that op's output [C, pixels] flattened, C = I / pixels), the words its staging
// would write.
struct FcSoftmaxTensors {
  const float* in = nullptr;             // [n, I]
  const float* weight = nullptr;         // [10, I]
  const float* bias = nullptr;           // [10]
  const std::uint8_t* labels = nullptr;  // [n]
  float* logits = nullptr;               // [n, 10] or null
  float* grad_logits = nullptr;          // [n, 10] or null (evaluation)
  float* grad_in = nullptr;              // [n, I] or null
  StagedTensor grad_in_staged;           // words null: none
  bool mask_relu = false;
  float* sample_loss = nullptr;  // [n]
  int* sample_correct = nullptr; // [n]
};
void fc_softmax_cross_entropy(const FcSoftmaxTensors& t, std::int64_t n, std::int64_t in_features,
                              float label_smoothing, cudaStream_t stream);

// maxpool_backward with the backward of a ReLU before the pool folded in (when pooled_out, the
// pool's output, is given): zero wherever the pool's input <= 0. Only winners get gradient, and a
// winner's input is its window's maximum, so the test reads pooled_out > 0.
void maxpool_backward_masked(float* grad_in, const float* grad_out, const std::int32_t* argmax,
                             const float* pooled_out, std::int64_t n, const PoolShape& shape, cudaStream_t stream);
// The same for tiled windows (size == stride), written straight into the staged layout of the conv
// before the pool (grad_in.words): the values maxpool_backward_masked writes, rounded as
// conv2d_stage_backward rounds them, bit for bit, in one pass that writes 2 (bf16) or 4 (tf32) bytes
// per element where the two wrote 4, then read 4 and wrote 2 or 4 again. Where grad_out_partials.sums,
// the output gradient is their sum (the conv after's input gradient, conv_input_grad_partials) and
// grad_out is not read.
void maxpool_backward_masked_staged(const StagedTensor& grad_in, const float* grad_out,
                                    const SplitPartials& grad_out_partials, const std::int32_t* argmax,
                                    const float* pooled_out, std::int64_t n, const PoolShape& shape,
                                    cudaStream_t stream);

// maxpool_forward that also writes its output into the staged input of the conv after the pool
// (out_staged.words, [n,OH,OW,Cp]): the words that conv's staging would write, bit for bit.
void maxpool_forward_staged(float* out, std::int32_t* argmax, const StagedTensor& out_staged, const float* in,
                            std::int64_t n, const PoolShape& shape, cudaStream_t stream);

// avgpool_backward with the backward of a ReLU before the pool folded in (when relu_in, the pool's
// input, is given): zero wherever relu_in <= 0 (avgpool.cu).
void avgpool_backward_masked(float* grad_in, const float* grad_out, const float* relu_in, std::int64_t n,
                             const AvgPoolShape& shape, cudaStream_t stream);

// A first layer conv3x3 (stride 1, no padding, 1 or 3 channels) + ReLU + 2x2/2 max-pool is the seed
// model's fused op (conv_relu_pool_forward / conv_relu_pool_backward, cuda_ops.hpp): the forward
// computes each pool cell's four conv outputs from one input patch and keeps only the winner
// (a*2+b, uint8), so the [n,F,OH,OW] conv output and its gradient never exist; the weight gradient
// sums each winner's window times dL/dpooled (zero where the ReLU cut) over samples and cells,
// with no input gradient (nothing before the layer needs one). The conv_relu_pool op takes this form
// for such a pair; its plan sizes the sweep's partial sums, which come from `workspace`.
// When the layer is the network's first op, the forward reads the resident uint8 data set through
// the batch's indices (no gathered float batch) and saves each pool cell's 4x4 patch as one 16-byte
// word per channel, [n,C,P], from which the weight gradient reads its windows (from_patches).
struct ConvReluPoolPlan {
  SweepPlan sweep;
  bool from_patches = false;
  std::int64_t workspace_floats = 0;
};
ConvReluPoolPlan plan_conv_relu_pool(const SeedModel& m, std::int64_t n, bool from_patches);
// patches may be null (evaluation: no weight gradient follows). pooled_staged: the staged input of a
// conv after the op, written beside `pooled` (StagedTensor), or words null.
void conv_relu_pool_forward_from_data(float* pooled /*[n,F,PH,PW]*/, std::uint8_t* argmax /*[n,F,PH,PW]*/,
                                      uint4* patches /*[n,C,PH*PW] or null*/, const StagedTensor& pooled_staged,
                                      const std::uint8_t* images /*[N,C,H,W]*/,
                                      const std::int32_t* indices /*[n]*/, const float* weight /*[F,C,3,3]*/,
                                      const float* bias /*[F]*/, std::int64_t n, const SeedModel& m,
                                      cudaStream_t stream);
// grad_weight, grad_bias = (accumulate ? += : =) the batch's sums; the windows from the forward's
// saved patches where plan.from_patches, else from the gathered floats `in` (the other may be null).
void conv_relu_pool_backward_weights(const ConvReluPoolPlan& plan, float* grad_weight /*[F,C,3,3]*/,
                                     float* grad_bias /*[F]*/, const float* grad_pooled /*[n,F,PH,PW]*/,
                                     const float* pooled /*[n,F,PH,PW]*/, const std::uint8_t* argmax /*[n,F,PH,PW]*/,
                                     const float* in /*[n,C,H,W]*/, const uint4* patches /*[n,C,PH*PW]*/,
                                     std::int64_t n, const SeedModel& m, bool accumulate, float* workspace,
                                     cudaStream_t stream);

}  // namespace cnn::cuda
