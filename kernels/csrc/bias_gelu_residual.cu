// out = gelu(x + bias) + residual, bf16 in and out, fp32 math, 16-byte vectorized loads and stores.
// x, residual, out: [rows, cols] row-major; bias: [cols]. Launched on the caller's stream.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cstdint>

namespace {

constexpr int kVector = 8;  // 8 bf16 = 16 bytes per load

__device__ __forceinline__ float gelu_tanh(float v) {
  // x * sigmoid(2 * sqrt(2/pi) * (x + 0.044715 x^3)), the tanh form of GELU
  const float z = 1.5957691216057308f * (v + 0.044715f * v * v * v);
  return v / (1.0f + __expf(-z));
}

__global__ void bias_gelu_residual_vec(const uint4* __restrict__ x, const uint4* __restrict__ bias,
                                       const uint4* __restrict__ residual, uint4* __restrict__ out,
                                       int64_t vectors, int64_t vectors_per_row) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < vectors;
       i += (int64_t)gridDim.x * blockDim.x) {
    uint4 xv = x[i];
    uint4 rv = residual[i];
    uint4 bv = bias[i % vectors_per_row];
    const __nv_bfloat16* xs = reinterpret_cast<const __nv_bfloat16*>(&xv);
    const __nv_bfloat16* rs = reinterpret_cast<const __nv_bfloat16*>(&rv);
    const __nv_bfloat16* bs = reinterpret_cast<const __nv_bfloat16*>(&bv);
    uint4 ov;
    __nv_bfloat16* os = reinterpret_cast<__nv_bfloat16*>(&ov);
#pragma unroll
    for (int k = 0; k < kVector; ++k) {
      const float v = __bfloat162float(xs[k]) + __bfloat162float(bs[k]);
      os[k] = __float2bfloat16(gelu_tanh(v) + __bfloat162float(rs[k]));
    }
    out[i] = ov;
  }
}

__global__ void bias_gelu_residual_scalar(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ bias,
                                          const __nv_bfloat16* __restrict__ residual, __nv_bfloat16* __restrict__ out,
                                          int64_t elements, int64_t cols) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < elements;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float v = __bfloat162float(x[i]) + __bfloat162float(bias[i % cols]);
    out[i] = __float2bfloat16(gelu_tanh(v) + __bfloat162float(residual[i]));
  }
}

}  // namespace

extern "C" int solgate_bias_gelu_residual_bf16(const void* x, const void* bias, const void* residual, void* out,
                                               int64_t rows, int64_t cols, void* stream) {
  const int64_t elements = rows * cols;
  if (elements == 0) return 0;
  const int threads = 256;
  const bool aligned = cols % kVector == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(bias) % 16 == 0 && reinterpret_cast<uintptr_t>(residual) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(out) % 16 == 0;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (aligned) {
    const int64_t vectors = elements / kVector;
    const int64_t blocks = (vectors + threads - 1) / threads;
    bias_gelu_residual_vec<<<(unsigned)(blocks < 65535 * 8 ? blocks : 65535 * 8), threads, 0, s>>>(
        static_cast<const uint4*>(x), static_cast<const uint4*>(bias), static_cast<const uint4*>(residual),
        static_cast<uint4*>(out), vectors, cols / kVector);
  } else {
    const int64_t blocks = (elements + threads - 1) / threads;
    bias_gelu_residual_scalar<<<(unsigned)(blocks < 65535 * 8 ? blocks : 65535 * 8), threads, 0, s>>>(
        static_cast<const __nv_bfloat16*>(x), static_cast<const __nv_bfloat16*>(bias),
        static_cast<const __nv_bfloat16*>(residual), static_cast<__nv_bfloat16*>(out), elements, cols);
  }
  return static_cast<int>(cudaGetLastError());
}

// The driver's and this build's CUDA runtime versions (e.g. 12040 for 12.4), so that the Python
// side can refuse a toolkit newer than the driver with a clear message before any launch (which
// would otherwise fail with cudaErrorInsufficientDriver, error 35).
extern "C" int solgate_cuda_versions(int* driver, int* runtime) {
  *driver = 0;
  *runtime = 0;
  cudaDriverGetVersion(driver);
  return static_cast<int>(cudaRuntimeGetVersion(runtime));
}
