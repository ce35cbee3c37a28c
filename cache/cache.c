/* cache.c — the LMDB kernel cache, first part: the content-addressed `kernels` database that
 * `fourbit gen --cache DIR` fills (winners, trials, export/import and verify arrive with the tuner/cache
 * issue). One LMDB environment per directory (local disk only: LMDB's locks do not work on network file
 * systems); writers take short transactions, readers never block them; a killed process leaves the last
 * committed state. The map grows on MDB_MAP_FULL.
 *
 * kernels: key   = sha256(source || NUL || arch || NUL || NVRTC version || NUL || compile options)
 *          value = "FBK1" | u32 format version | u64 cubin size | sha256(source) | sha256(cubin) | cubin
 * Entry points: fb_cache_open(), fb_cache_close(), fb_cache_kernel_key(), fb_cache_put_kernel(),
 * fb_cache_get_kernel(). */
#include "fb_error.h"

#include <lmdb.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define KERNEL_FORMAT 1u
#define HDR (4 + 4 + 8 + 32 + 32)

struct fb_cache {
  MDB_env *env;
  MDB_dbi kernels;
  char dir[512];
};

fb_status fb_cache_open(const char *dir, fb_cache **out) {
  *out = NULL;
  if (mkdir(dir, 0755) != 0) {
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return FB_USERERR(FB_EIO, "%s: cannot create the cache directory", dir);
  }
  fb_cache *c = calloc(1, sizeof *c);
  if (!c) return FB_ERR(FB_ENOMEM, "cache");
  snprintf(c->dir, sizeof c->dir, "%s", dir);
  fb_status rc = FB_OK;
  MDB_txn *txn = NULL;
  LMDB_CHECK_GOTO(mdb_env_create(&c->env), fail);
  LMDB_CHECK_GOTO(mdb_env_set_maxdbs(c->env, 8), fail);
  LMDB_CHECK_GOTO(mdb_env_set_mapsize(c->env, (size_t)256 << 20), fail);
  LMDB_CHECK_GOTO(mdb_env_open(c->env, dir, 0, 0644), fail);
  LMDB_CHECK_GOTO(mdb_txn_begin(c->env, NULL, 0, &txn), fail);
  LMDB_CHECK_GOTO(mdb_dbi_open(txn, "kernels", MDB_CREATE, &c->kernels), fail);
  LMDB_CHECK_GOTO(mdb_txn_commit(txn), fail);
  txn = NULL;
  *out = c;
  return FB_OK;
fail:
  if (txn) mdb_txn_abort(txn);
  if (c->env) mdb_env_close(c->env);
  free(c);
  return rc;
}

void fb_cache_close(fb_cache *c) {
  if (!c) return;
  mdb_env_close(c->env);
  free(c);
}

void fb_cache_kernel_key(const char *src, const char *arch, uint8_t key[32]) {
  int maj = 0, min = 0;
  nvrtcVersion(&maj, &min);
  size_t n = strlen(src), a = strlen(arch);
  char tail[256];
  int t = snprintf(tail, sizeof tail, "nvrtc %d.%d|%s", maj, min, fb_nvrtc_options());
  char *buf = malloc(n + a + (size_t)t + 3);
  if (!buf) {
    memset(key, 0, 32);
    return;
  }
  memcpy(buf, src, n + 1);
  memcpy(buf + n + 1, arch, a + 1);
  memcpy(buf + n + a + 2, tail, (size_t)t + 1);
  fb_sha256(buf, n + a + (size_t)t + 3, key);
  free(buf);
}

fb_status fb_cache_put_kernel(fb_cache *c, const uint8_t key[32], const char *src, const void *cubin, size_t size) {
  size_t vn = HDR + size;
  uint8_t *v = malloc(vn);
  if (!v) return FB_ERR(FB_ENOMEM, "cache value");
  uint32_t ver = KERNEL_FORMAT;
  uint64_t sz = size;
  memcpy(v, "FBK1", 4);
  memcpy(v + 4, &ver, 4);
  memcpy(v + 8, &sz, 8);
  fb_sha256(src, strlen(src), v + 16);
  fb_sha256(cubin, size, v + 48);
  memcpy(v + HDR, cubin, size);
  fb_status rc = FB_OK;
  for (int attempt = 0; attempt < 8; ++attempt) {
    MDB_txn *txn = NULL;
    MDB_val k = {32, (void *)key}, val = {vn, v};
    int r = mdb_txn_begin(c->env, NULL, 0, &txn);
    if (r == MDB_MAP_RESIZED) r = mdb_env_set_mapsize(c->env, 0) ? r : mdb_txn_begin(c->env, NULL, 0, &txn);
    if (r == 0) r = mdb_put(txn, c->kernels, &k, &val, 0);
    if (r == 0) {
      r = mdb_txn_commit(txn);
      txn = NULL;
    }
    if (txn) mdb_txn_abort(txn);
    if (r == MDB_MAP_FULL) { /* grow the map and try again */
      MDB_envinfo info;
      mdb_env_info(c->env, &info);
      if (mdb_env_set_mapsize(c->env, info.me_mapsize * 2) == 0) continue;
    }
    if (r != 0) rc = FB_ERR(FB_ELMDB, "%s: storing a kernel: %s", c->dir, mdb_strerror(r));
    break;
  }
  free(v);
  return rc;
}

fb_status fb_cache_get_kernel(fb_cache *c, const uint8_t key[32], void **cubin, size_t *size) {
  *cubin = NULL, *size = 0;
  MDB_txn *txn = NULL;
  fb_status rc = FB_OK;
  LMDB_CHECK(mdb_txn_begin(c->env, NULL, MDB_RDONLY, &txn));
  MDB_val k = {32, (void *)key}, v;
  int r = mdb_get(txn, c->kernels, &k, &v);
  if (r == MDB_NOTFOUND) {
    rc = FB_ENOTFOUND;
  } else if (r != 0) {
    rc = FB_ERR(FB_ELMDB, "%s: reading a kernel: %s", c->dir, mdb_strerror(r));
  } else {
    const uint8_t *p = v.mv_data;
    uint32_t ver;
    uint64_t sz;
    uint8_t sum[32];
    if (v.mv_size < HDR) return mdb_txn_abort(txn), FB_ERR(FB_ELMDB, "%s: a kernel entry is truncated", c->dir);
    memcpy(&ver, p + 4, 4);
    memcpy(&sz, p + 8, 8);
    if (memcmp(p, "FBK1", 4) || ver != KERNEL_FORMAT || sz != v.mv_size - HDR) {
      rc = FB_ERR(FB_ELMDB, "%s: a kernel entry has another format (version %u): not loaded", c->dir, ver);
    } else {
      fb_sha256(p + HDR, sz, sum);
      if (memcmp(sum, p + 48, 32)) rc = FB_ERR(FB_ELMDB, "%s: a kernel entry fails its checksum: not loaded", c->dir);
      else if (!(*cubin = malloc(sz ? sz : 1))) rc = FB_ERR(FB_ENOMEM, "cubin");
      else memcpy(*cubin, p + HDR, sz), *size = sz;
    }
  }
  mdb_txn_abort(txn);
  return rc;
}
