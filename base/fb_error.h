/* fb_error.h — internal error plumbing: every failing call returns an fb_status and leaves
 * "file:line: call: message" in a per-thread buffer (fb_errmsg()). Only main() exits.
 * The *_CHECK macros return; the *_GOTO twins set `rc` and jump to a cleanup label.
 * A macro names its library's functions only when expanded, so a file includes the headers of
 * the libraries it actually calls (cuda.h, nvrtc.h, lmdb.h, nccl.h, lua.h). */
#ifndef FB_ERROR_H
#define FB_ERROR_H
#include "fourbit/base.h"

#if defined(__GNUC__)
#define FB_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define FB_PRINTF(a, b)
#endif

fb_status fb_seterr(fb_status s, const char *file, int line, const char *fmt, ...) FB_PRINTF(4, 5);
void fb_clearerr(void);
/* Error text of a CUresult through the dlopen'd driver (works before/without cuInit). */
const char *fb_cu_errstr(int result);

#define FB_ERR(code, ...) fb_seterr((code), __FILE__, __LINE__, __VA_ARGS__)
/* Errors in the user's input (a recipe, a file) name the input's own file:line, not ours. */
#define FB_USERERR(code, ...) fb_seterr((code), NULL, 0, __VA_ARGS__)
#define FB_TRY(call) do { fb_status fb_s_ = (call); if (fb_s_ != FB_OK) return fb_s_; } while (0)
#define FB_TRY_GOTO(call, label) do { rc = (call); if (rc != FB_OK) goto label; } while (0)

#define CU_CHECK(call) do { int fb_r_ = (int)(call); if (fb_r_ != 0) \
  return fb_seterr(FB_ECUDA, __FILE__, __LINE__, "%s: %s", #call, fb_cu_errstr(fb_r_)); } while (0)
#define CU_CHECK_GOTO(call, label) do { int fb_r_ = (int)(call); if (fb_r_ != 0) { \
  rc = fb_seterr(FB_ECUDA, __FILE__, __LINE__, "%s: %s", #call, fb_cu_errstr(fb_r_)); goto label; } } while (0)

/* NVRTC: the program's log is appended when prog is non-null. */
fb_status fb_nvrtc_fail(const char *file, int line, const char *call, int result, void *prog);
#define NVRTC_CHECK(call, prog) do { int fb_r_ = (int)(call); if (fb_r_ != 0) \
  return fb_nvrtc_fail(__FILE__, __LINE__, #call, fb_r_, (void *)(prog)); } while (0)
#define NVRTC_CHECK_GOTO(call, prog, label) do { int fb_r_ = (int)(call); if (fb_r_ != 0) { \
  rc = fb_nvrtc_fail(__FILE__, __LINE__, #call, fb_r_, (void *)(prog)); goto label; } } while (0)

#define LMDB_CHECK(call) do { int fb_r_ = (call); if (fb_r_ != 0) \
  return fb_seterr(FB_ELMDB, __FILE__, __LINE__, "%s: %s", #call, mdb_strerror(fb_r_)); } while (0)
#define LMDB_CHECK_GOTO(call, label) do { int fb_r_ = (call); if (fb_r_ != 0) { \
  rc = fb_seterr(FB_ELMDB, __FILE__, __LINE__, "%s: %s", #call, mdb_strerror(fb_r_)); goto label; } } while (0)

#define NCCL_CHECK(call) do { ncclResult_t fb_r_ = (call); if (fb_r_ != ncclSuccess) \
  return fb_seterr(FB_ENCCL, __FILE__, __LINE__, "%s: %s", #call, ncclGetErrorString(fb_r_)); } while (0)
#define NCCL_CHECK_GOTO(call, label) do { ncclResult_t fb_r_ = (call); if (fb_r_ != ncclSuccess) { \
  rc = fb_seterr(FB_ENCCL, __FILE__, __LINE__, "%s: %s", #call, ncclGetErrorString(fb_r_)); goto label; } } while (0)

/* Lua: the message is the value on top of the stack (popped). */
#define LUA_CHECK(L, call) do { int fb_r_ = (call); if (fb_r_ != LUA_OK) { \
  const char *fb_m_ = lua_tostring((L), -1); \
  fb_status fb_s_ = fb_seterr(FB_ELUA, __FILE__, __LINE__, "%s: %s", #call, fb_m_ ? fb_m_ : "(no message)"); \
  lua_pop((L), 1); return fb_s_; } } while (0)
#define LUA_CHECK_GOTO(L, call, label) do { int fb_r_ = (call); if (fb_r_ != LUA_OK) { \
  const char *fb_m_ = lua_tostring((L), -1); \
  rc = fb_seterr(FB_ELUA, __FILE__, __LINE__, "%s: %s", #call, fb_m_ ? fb_m_ : "(no message)"); \
  lua_pop((L), 1); goto label; } } while (0)

#endif
