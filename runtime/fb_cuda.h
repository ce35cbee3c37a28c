/* fb_cuda.h — the CUDA driver API through dlopen("libcuda.so.1"), loaded at first use, so that the
 * binary starts (and everything but running kernels works) on machines with no GPU driver.
 * Entry points: fb_cuda_load() (fourbit.h), fb_cu (the function table, valid after FB_OK). */
#ifndef FB_CUDA_H
#define FB_CUDA_H
#include "fourbit.h"
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
} fb_cu_api;

extern fb_cu_api fb_cu;

/* What a device is: the fingerprint the cache keys winners by. */
typedef struct {
  char name[256];
  int cc_major, cc_minor, sm_count, driver_version;
  size_t mem_bytes;
} fb_cuda_device_info;

fb_status fb_cuda_device_count(int *n);
fb_status fb_cuda_device_info_get(int ordinal, fb_cuda_device_info *info);
#endif
