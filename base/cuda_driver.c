/* cuda_driver.c — load libcuda.so.1 with dlopen at first use and resolve the driver entry points
 * fourbit calls (versioned symbol names, as the cuda.h macros would pick). Thread-safe via pthread_once. */
#include "fb_cuda.h"
#include "fb_error.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

fb_cu_api fb_cu;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static fb_status load_status = FB_ECUDA;
static char load_err[1024];

static void load(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(load_err, sizeof load_err, "dlopen(libcuda.so.1): %s: no CUDA driver here, kernels cannot run",
             dlerror());
    return;
  }
  struct { void **slot; const char *name; } syms[] = {
      {(void **)&fb_cu.Init, "cuInit"},
      {(void **)&fb_cu.DriverGetVersion, "cuDriverGetVersion"},
      {(void **)&fb_cu.DeviceGetCount, "cuDeviceGetCount"},
      {(void **)&fb_cu.DeviceGet, "cuDeviceGet"},
      {(void **)&fb_cu.DeviceGetName, "cuDeviceGetName"},
      {(void **)&fb_cu.DeviceGetAttribute, "cuDeviceGetAttribute"},
      {(void **)&fb_cu.DeviceTotalMem, "cuDeviceTotalMem_v2"},
      {(void **)&fb_cu.GetErrorString, "cuGetErrorString"},
      {(void **)&fb_cu.DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"},
      {(void **)&fb_cu.CtxSetCurrent, "cuCtxSetCurrent"},
      {(void **)&fb_cu.CtxSynchronize, "cuCtxSynchronize"},
      {(void **)&fb_cu.ModuleLoadData, "cuModuleLoadData"},
      {(void **)&fb_cu.ModuleUnload, "cuModuleUnload"},
      {(void **)&fb_cu.ModuleGetFunction, "cuModuleGetFunction"},
      {(void **)&fb_cu.FuncGetAttribute, "cuFuncGetAttribute"},
      {(void **)&fb_cu.OccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor"},
      {(void **)&fb_cu.LaunchKernel, "cuLaunchKernel"},
      {(void **)&fb_cu.MemAlloc, "cuMemAlloc_v2"},
      {(void **)&fb_cu.MemFree, "cuMemFree_v2"},
      {(void **)&fb_cu.MemcpyHtoD, "cuMemcpyHtoD_v2"},
      {(void **)&fb_cu.MemcpyDtoH, "cuMemcpyDtoH_v2"},
      {(void **)&fb_cu.MemcpyDtoD, "cuMemcpyDtoD_v2"},
      {(void **)&fb_cu.MemsetD8, "cuMemsetD8_v2"},
      {(void **)&fb_cu.MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"},
      {(void **)&fb_cu.MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"},
      {(void **)&fb_cu.MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"},
      {(void **)&fb_cu.MemsetD8Async, "cuMemsetD8Async"},
      {(void **)&fb_cu.StreamSynchronize, "cuStreamSynchronize"},
      {(void **)&fb_cu.StreamWaitEvent, "cuStreamWaitEvent"},
      {(void **)&fb_cu.MemGetInfo, "cuMemGetInfo_v2"},
      {(void **)&fb_cu.EventCreate, "cuEventCreate"},
      {(void **)&fb_cu.EventRecord, "cuEventRecord"},
      {(void **)&fb_cu.EventSynchronize, "cuEventSynchronize"},
      {(void **)&fb_cu.EventElapsedTime, "cuEventElapsedTime"},
      {(void **)&fb_cu.EventDestroy, "cuEventDestroy_v2"},
      {(void **)&fb_cu.FuncSetAttribute, "cuFuncSetAttribute"},
      {(void **)&fb_cu.TensorMapEncodeTiled, "cuTensorMapEncodeTiled"},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; ++i) {
    *syms[i].slot = dlsym(h, syms[i].name);
    if (!*syms[i].slot) {
      snprintf(load_err, sizeof load_err, "libcuda.so.1 has no symbol %s (driver too old?)", syms[i].name);
      memset(&fb_cu, 0, sizeof fb_cu);
      return;
    }
  }
  fb_cu.LaunchKernelEx = (CUresult(*)(const CUlaunchConfig *, CUfunction, void **, void **))dlsym(h, "cuLaunchKernelEx"); /* optional */
  fb_cu.StreamCreate = (CUresult(*)(CUstream *, unsigned))dlsym(h, "cuStreamCreate");       /* optional, both or neither */
  fb_cu.StreamDestroy = (CUresult(*)(CUstream))dlsym(h, "cuStreamDestroy_v2");
  if (!fb_cu.StreamCreate || !fb_cu.StreamDestroy) fb_cu.StreamCreate = NULL, fb_cu.StreamDestroy = NULL;
  CUresult r = fb_cu.Init(0);
  if (r != CUDA_SUCCESS) {
    const char *s = NULL;
    fb_cu.GetErrorString(r, &s);
    snprintf(load_err, sizeof load_err, "cuInit(0): %s", s ? s : "unknown error");
    return;
  }
  load_status = FB_OK;
}

fb_status fb_cuda_load(void) {
  pthread_once(&once, load);
  if (load_status != FB_OK) return FB_ERR(FB_ECUDA, "%s", load_err);
  return FB_OK;
}

const char *fb_cu_errstr(int result) {
  const char *s = NULL;
  if (fb_cu.GetErrorString && fb_cu.GetErrorString((CUresult)result, &s) == CUDA_SUCCESS && s) return s;
  return "unknown CUDA error";
}

fb_status fb_cuda_device_count(int *n) {
  FB_TRY(fb_cuda_load());
  CU_CHECK(fb_cu.DeviceGetCount(n));
  return FB_OK;
}

int fb_cuda_emulated(void) { return 0; }

fb_status fb_cuda_device_info_get(int ordinal, fb_cuda_device_info *info) {
  FB_TRY(fb_cuda_load());
  CUdevice d;
  memset(info, 0, sizeof *info);
  CU_CHECK(fb_cu.DeviceGet(&d, ordinal));
  CU_CHECK(fb_cu.DeviceGetName(info->name, (int)sizeof info->name - 1, d));
  CU_CHECK(fb_cu.DeviceGetAttribute(&info->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d));
  CU_CHECK(fb_cu.DeviceGetAttribute(&info->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d));
  CU_CHECK(fb_cu.DeviceGetAttribute(&info->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d));
  CU_CHECK(fb_cu.DeviceTotalMem(&info->mem_bytes, d));
  CU_CHECK(fb_cu.DriverGetVersion(&info->driver_version));
  return FB_OK;
}

fb_status fb_cuda_use_device(int ordinal) {
  FB_TRY(fb_cuda_load());
  CUdevice d;
  CUcontext ctx;
  CU_CHECK(fb_cu.DeviceGet(&d, ordinal));
  CU_CHECK(fb_cu.DevicePrimaryCtxRetain(&ctx, d));
  CU_CHECK(fb_cu.CtxSetCurrent(ctx));
  return FB_OK;
}

static __thread CUstream cur_stream;
void fb_cuda_set_stream(CUstream s) { cur_stream = s; }
CUstream fb_cuda_stream(void) { return cur_stream; }

fb_status fb_kernel_load(const void *cubin, const char *name, fb_kernel *k) {
  memset(k, 0, sizeof *k);
  FB_TRY(fb_cuda_load());
  CU_CHECK(fb_cu.ModuleLoadData(&k->mod, cubin));
  CUresult r = fb_cu.ModuleGetFunction(&k->fn, k->mod, name);
  if (r != CUDA_SUCCESS) {
    fb_cu.ModuleUnload(k->mod);
    k->mod = NULL;
    return FB_ERR(FB_ECUDA, "cuModuleGetFunction(%s): %s", name, fb_cu_errstr(r));
  }
  return FB_OK;
}

void fb_kernel_unload(fb_kernel *k) {
  if (k->mod) fb_cu.ModuleUnload(k->mod);
  memset(k, 0, sizeof *k);
}

fb_status fb_kernel_launch(const fb_kernel *k, unsigned grid_x, unsigned grid_y, unsigned threads, const void *params,
                           size_t params_size) {
  /* the parameter block goes as one by-value argument: CU_LAUNCH_PARAM_BUFFER_POINTER */
  size_t sz = params_size;
  void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, (void *)params, CU_LAUNCH_PARAM_BUFFER_SIZE, &sz, CU_LAUNCH_PARAM_END};
  CU_CHECK(fb_cu.LaunchKernel(k->fn, grid_x, grid_y, 1, threads, 1, 1, 0, cur_stream, NULL, extra));
  return FB_OK;
}

fb_status fb_kernel_launch_smem(const fb_kernel *k, unsigned grid_x, unsigned grid_y, unsigned threads, unsigned smem,
                                const void *params, size_t params_size) {
  if (smem > 48 * 1024) CU_CHECK(fb_cu.FuncSetAttribute(k->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem));
  /* kernelParams, not CU_LAUNCH_PARAM_BUFFER_POINTER: a 64-byte aligned parameter (the GEMMs' TMA descriptors)
     does not start at the parameter bank's first byte, and only the driver knows its offset (seen on the H200:
     a raw buffer arrived 48 bytes early) */
  (void)params_size;
  void *args[] = {(void *)params};
  CU_CHECK(fb_cu.LaunchKernel(k->fn, grid_x, grid_y, 1, threads, 1, 1, smem, cur_stream, args, NULL));
  return FB_OK;
}

fb_status fb_kernel_launch_cluster(const fb_kernel *k, unsigned grid_x, unsigned grid_y, unsigned threads, unsigned cluster_x,
                                   unsigned smem, const void *params, size_t params_size) {
  if (cluster_x <= 1) return fb_kernel_launch_smem(k, grid_x, grid_y, threads, smem, params, params_size);
  if (grid_x % cluster_x) return FB_ERR(FB_EINVAL, "launch: grid %u is not a multiple of the cluster's %u CTAs", grid_x, cluster_x);
  if (!fb_cu.LaunchKernelEx)
    return FB_ERR(FB_ECUDA, "a kernel launched as clusters of %u CTAs needs cuLaunchKernelEx, which this driver does not have "
                  "(driver too old?)", cluster_x);
  if (smem > 48 * 1024) CU_CHECK(fb_cu.FuncSetAttribute(k->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem));
  CUlaunchAttribute at;
  memset(&at, 0, sizeof at);
  at.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  at.value.clusterDim.x = cluster_x, at.value.clusterDim.y = 1, at.value.clusterDim.z = 1;
  CUlaunchConfig cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.gridDimX = grid_x, cfg.gridDimY = grid_y, cfg.gridDimZ = 1;
  cfg.blockDimX = threads, cfg.blockDimY = 1, cfg.blockDimZ = 1;
  cfg.sharedMemBytes = smem, cfg.hStream = cur_stream, cfg.attrs = &at, cfg.numAttrs = 1;
  (void)params_size;
  void *args[] = {(void *)params}; /* kernelParams, as fb_kernel_launch_smem (the 64-byte aligned TMA descriptors) */
  CU_CHECK(fb_cu.LaunchKernelEx(&cfg, k->fn, args, NULL));
  return FB_OK;
}
