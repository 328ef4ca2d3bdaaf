// encode_words_map (tensor_map.hpp).
#include "cuda/tensor_map.hpp"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <string>

#include "cnn/errors.hpp"
#include "cuda/cuda_check.hpp"

namespace cnn::cuda {

namespace {
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encoder = [] {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    CNN_CHECK_CUDA(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &function, 12000, cudaEnableDefault,
                                                    &found));
    if (found != cudaDriverEntryPointSuccess || function == nullptr)
      throw Error(ExitCode::kFailure, "the CUDA driver has no cuTensorMapEncodeTiled (TMA needs driver 12.0 or newer)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(function);
  }();
  return encoder;
}
}  // namespace

CUtensorMap encode_words_map(const void* base, std::initializer_list<std::uint64_t> dims,
                             std::initializer_list<unsigned> box) {
  const unsigned rank = static_cast<unsigned>(dims.size());
  if (rank < 1 || rank > 5 || box.size() != rank)
    throw Error(ExitCode::kFailure, "internal error: a tensor map of " + std::to_string(rank) + " dimensions");
  cuuint64_t global_dims[5] = {}, strides[4] = {};
  cuuint32_t box_dims[5] = {}, element_strides[5] = {1, 1, 1, 1, 1};
  unsigned d = 0;
  std::uint64_t bytes = sizeof(std::uint32_t);
  for (const std::uint64_t dim : dims) {
    global_dims[d] = dim;
    bytes *= dim;
    if (d + 1 < rank) strides[d] = bytes;  // the next dimension's stride
    ++d;
  }
  d = 0;
  for (const unsigned b : box) box_dims[d++] = b;
  CUtensorMap map{};
  const CUresult result = tensor_map_encoder()(
      &map, CU_TENSOR_MAP_DATA_TYPE_UINT32, rank, const_cast<void*>(base), global_dims, strides, box_dims,
      element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_64B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS)
    throw Error(ExitCode::kFailure, "internal error: cuTensorMapEncodeTiled refused a map (CUresult " +
                                        std::to_string(static_cast<int>(result)) + ")");
  return map;
}

}  // namespace cnn::cuda
