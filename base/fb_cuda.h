/* fb_cuda.h — the CUDA driver API through dlopen("libcuda.so.1"), loaded at first use, so that the
 * binary starts (and everything but running kernels works) on machines with no GPU driver.
 * Entry points: fb_cuda_load() (fourbit.h), fb_cu (the function table, valid after FB_OK). */
#ifndef FB_CUDA_H
#define FB_CUDA_H
#include "fourbit/base.h"
#include <cuda.h>

typedef struct {
  CUresult (*Init)(unsigned);
  CUresult (*DriverGetVersion)(int *);
  CUresult (*DeviceGetCount)(int *);
  CUresult (*DeviceGet)(CUdevice *, int);
  CUresult (*DeviceGetName)(char *, int, CUdevice);
  CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
  CUresult (*DeviceTotalMem)(size_t *, CUdevice);
  CUresult (*GetErrorString)(CUresult, const char **);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*CtxSynchronize)(void);
  CUresult (*ModuleLoadData)(CUmodule *, const void *);
  CUresult (*ModuleUnload)(CUmodule);
  CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*FuncGetAttribute)(int *, CUfunction_attribute, CUfunction);
  CUresult (*OccupancyMaxActiveBlocksPerMultiprocessor)(int *, CUfunction, int, size_t);
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           CUstream, void **, void **);
  CUresult (*MemAlloc)(CUdeviceptr *, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*MemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
  CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
  CUresult (*MemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
  CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*MemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*StreamWaitEvent)(CUstream, CUevent, unsigned);
  CUresult (*MemGetInfo)(size_t *, size_t *);
  CUresult (*EventCreate)(CUevent *, unsigned);
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*EventSynchronize)(CUevent);
  CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
  CUresult (*EventDestroy)(CUevent);
  CUresult (*FuncSetAttribute)(CUfunction, CUfunction_attribute, int);
  CUresult (*TensorMapEncodeTiled)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                   const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  /* optional (NULL when the driver has none): cluster launches (fb_kernel_launch_cluster) */
  CUresult (*LaunchKernelEx)(const CUlaunchConfig *, CUfunction, void **, void **);
  /* optional: the GPU expert layer's side streams (runtime/experts_gpu.c: the exchanges, FOURBIT_GPU_BPIPE's copies) */
  CUresult (*StreamCreate)(CUstream *, unsigned);
  CUresult (*StreamDestroy)(CUstream);
} fb_cu_api;

extern fb_cu_api fb_cu;

/* What a device is: the fingerprint the cache keys winners by. */
typedef struct {
  char name[256];
  int cc_major, cc_minor, sm_count, driver_version;
  size_t mem_bytes;
} fb_cuda_device_info;

fb_status fb_cuda_device_count(int *n);
/* 1 when this is the warp emulator's driver (tests/emu/driver.cpp), which runs the memory-bound kernels and, under the
 * functional model of the Blackwell instructions, the tcgen05 GEMMs only; 0 for the CUDA driver. */
int fb_cuda_emulated(void);
/* Make device `ordinal`'s primary context current on this thread. */
fb_status fb_cuda_use_device(int ordinal);

/* The stream this thread's launches, copies and memsets of the runtime go to (fb_kernel_launch*, runtime/experts_gpu.c):
 * NULL (the legacy default stream) until set. libfourbit.so sets the caller's stream for the length of a call (lib/abi.c),
 * so that a PyTorch job's layer runs on its current stream; the C trainer never sets one. Thread-local. */
void fb_cuda_set_stream(CUstream s);
CUstream fb_cuda_stream(void);

/* A loaded cubin and its one kernel (named as the generated variant). */
typedef struct {
  CUmodule mod;
  CUfunction fn;
} fb_kernel;
fb_status fb_kernel_load(const void *cubin, const char *name, fb_kernel *k);
void fb_kernel_unload(fb_kernel *k);
/* Launch on fb_cuda_stream() with the parameter block `params` (bytes of the struct the template takes by value). */
fb_status fb_kernel_launch(const fb_kernel *k, unsigned grid_x, unsigned grid_y, unsigned threads, const void *params,
                           size_t params_size);
/* Launch with dynamic shared memory (bytes; the kernel's opt-in limit is raised to it first). */
fb_status fb_kernel_launch_smem(const fb_kernel *k, unsigned grid_x, unsigned grid_y, unsigned threads, unsigned smem,
                                const void *params, size_t params_size);
/* The same as clusters of cluster_x CTAs along x (CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, cuLaunchKernelEx; grid_x a
 * multiple of cluster_x); cluster_x 1 is fb_kernel_launch_smem. FB_ECUDA when the driver has no cuLaunchKernelEx. */
fb_status fb_kernel_launch_cluster(const fb_kernel *k, unsigned grid_x, unsigned grid_y, unsigned threads, unsigned cluster_x,
                                   unsigned smem, const void *params, size_t params_size);
fb_status fb_cuda_device_info_get(int ordinal, fb_cuda_device_info *info);
#endif
