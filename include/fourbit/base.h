/* fourbit/base.h — the ground under every module (base/): the version, fb_status and the error message of the
 * last failure, SHA-256, and loading the CUDA driver. Everything else of the API builds on this header. */
#ifndef FOURBIT_BASE_H
#define FOURBIT_BASE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FB_VERSION "0.1.0"

/* ---- errors ------------------------------------------------------------------------------ */
typedef enum {
  FB_OK = 0,
  FB_EINVAL,    /* bad argument or input */
  FB_ENOMEM,
  FB_ECUDA,     /* CUDA driver (or no driver) */
  FB_ENVRTC,
  FB_ELMDB,
  FB_ENCCL,
  FB_ELUA,
  FB_ENOTFOUND,
  FB_EVARIANT,  /* a tuning candidate failed: logged, skipped */
  FB_ENUMERIC,  /* non-finite values where finite ones are required */
  FB_EIO        /* file system */
} fb_status;

/* The last error's message on this thread ("file:line: call: what"), "" if none. */
const char *fb_errmsg(void);
const char *fb_status_name(fb_status s);

/* ---- files (base/file.c) ---------------------------------------------------------------------- */
/* Write parts[0..n) as the whole of path: into a character device or FIFO directly; else through a temporary file
 * beside the file the path names once its symbolic links are followed, then renamed over it (a link stays a link,
 * the file's mode is kept). FB_EINVAL naming the path for an OUT that cannot be written (a folder, a block device,
 * a missing folder, no permission: nothing written); FB_EIO for a failure while writing (the old file kept). */
fb_status fb_file_write(const char *path, const void *const *parts, const size_t *sizes, int n);
/* Whether fb_file_write(path) could write: the same refusals (FB_EINVAL naming the path), a temporary file made
 * beside the target and removed; nothing else touched. For checking an OUT before long work. */
fb_status fb_file_check(const char *path);
/* The file path names once its symbolic links are followed (it need not exist): 0, or -1 with errno. */
int fb_file_resolve(const char *path, char *out, size_t cap);

/* ---- hashing (base/sha256.c) ----------------------------------------------------------------- */
void fb_sha256(const void *data, size_t len, uint8_t out[32]);
void fb_sha256_hex(const void *data, size_t len, char out[65]);

/* ---- CUDA driver, loaded with dlopen (base/cuda_driver.c) ------------------------------------- */
/* FB_OK if libcuda.so.1 loaded and cuInit succeeded; otherwise FB_ECUDA with the reason. */
fb_status fb_cuda_load(void);

#ifdef __cplusplus
}
#endif
#endif
