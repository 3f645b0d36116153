// A kernel the image's JIT toolchain compiles and the H200 runs (issue 24): built in the image with
// $CUDA_HOME/bin/nvcc -shared -Xcompiler -fPIC -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o selftest.so \
//   jit_selftest.cu -L$CUDA_HOME/lib64 -L$CUDA_HOME/lib64/stubs -lcudart   (FlashInfer's link flags, less -lcuda)
// and loaded on the GPU node after torch: ctypes.CDLL(...).sglstack_selftest(n) returns the wrong elements.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda/std/utility>
__global__ void scale(__nv_bfloat16* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  auto p = cuda::std::make_pair(i, a);
  if (p.first < n) x[p.first] = __float2bfloat16(p.second * __bfloat162float(x[p.first]));
}
// Returns the number of wrong elements (0 = every element doubled), or -(CUDA error code).
extern "C" int sglstack_selftest(int n) {
  __nv_bfloat16* h = new __nv_bfloat16[n];
  for (int i = 0; i < n; ++i) h[i] = __float2bfloat16((float)(i % 64));
  __nv_bfloat16* d = nullptr;
  cudaError_t e = cudaMalloc(&d, n * sizeof(__nv_bfloat16)); if (e) return -(int)e;
  cudaMemcpy(d, h, n * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice);
  scale<<<(n + 255) / 256, 256>>>(d, 2.0f, n);
  e = cudaDeviceSynchronize(); if (e) return -(int)e;
  cudaMemcpy(h, d, n * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost);
  cudaFree(d);
  int wrong = 0;
  for (int i = 0; i < n; ++i) if (__bfloat162float(h[i]) != 2.0f * (float)(i % 64)) ++wrong;
  delete[] h;
  return wrong;
}
