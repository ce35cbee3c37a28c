/* test_tc_ops.c — the tcgen05 instruction wrappers of templates/fb_tc_ops.h compile with NVRTC (ptxas 13.0) for
 * sm_100a and sm_103a: a kernel that calls every wrapper with run-time operands (so that none is folded away), its
 * descriptors from fb_tcgen05.h; ptxas reports no spills and no local memory. Where a cuobjdump is found
 * ($CUOBJDUMP, PATH, or the nvidia-cuda-cuobjdump wheel) the SASS must hold every form, 1-CTA and 2-CTA: the MMAs of
 * each kind (UTCHMMA, UTCQMMA, UTCOMMA.4X / .BLOCK16 on sm_103a, UTCOMMA for .block32), the commits (UTCBAR, the 1-CTA
 * multicast UTCBAR.MULTICAST), UTCCP, the TMEM loads and stores (LDTM, STTM), the
 * allocator (UTCATOMSWS, DEALLOC), the TMA loads, mbarriers, cluster barrier and proxy fence (fb_tc_ops_sync);
 * otherwise that half says it did not run. Nothing runs: no Blackwell GPU here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "fb_error.h"
#include "fourbit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *SRC =
    "#include \"fb_tc_ops.h\"\n"
    "extern \"C\" __global__ void __launch_bounds__(128) fb_tc_ops_forms(const unsigned *in, unsigned *out) {\n"
    "  __shared__ uint32_t slot[4];\n"
    "  __shared__ unsigned long long bar[2];\n"
    "  uint32_t s = (uint32_t)__cvta_generic_to_shared(slot), b = (uint32_t)__cvta_generic_to_shared(bar);\n"
    "  unsigned w = threadIdx.x / 32, acc = in[0] & 1;\n"
    "  if (w == 0) fbt_alloc(s, 256);\n"
    "  fbt_fence_before(); __syncthreads(); fbt_fence_after();\n"
    "  uint32_t t = slot[0];\n"
    "  uint64_t ad = fb_tc_sdesc(in[1] * 16, 16, 1024, FB_TC_SW128, 0, 0), bd = fb_tc_sdesc(in[2] * 16, 16, 1024, FB_TC_SW128, 0, 0);\n"
    "  if (w == 0 && fbt_elect_one()) {\n"
    "    fbt_cp_sf(t + 128, fb_tc_sdesc(in[3] * 16, 16, 128, FB_TC_SW_NONE, 0, 0));\n"
    "    fbt_mma_f16(t, ad, bd, fb_tc_idesc(FB_TC_BF16, FB_TC_BF16, FB_TC_D_F32, 128, 128, 0, 0), acc);\n"
    "    fbt_mma_mxf8(t, ad, bd, fb_tc_idesc_bs(FB_TC_E4M3, FB_TC_E4M3, 1, 128, 128, 0, 0, in[4] & 3, in[5] & 3, 0), t + 128, t + 132, acc);\n"
    "    fbt_mma_nvf4(t, ad, bd, fb_tc_idesc_bs(FB_TC_MXF4_E2M1, FB_TC_MXF4_E2M1, 0, 128, 128, 0, 0, 0, 0, in[6] & 1), t + 128, t + 132, acc);\n"
    "    fbt_mma_mxf4(t, ad, bd, fb_tc_idesc_bs(FB_TC_MXF4_E2M1, FB_TC_MXF4_E2M1, 1, 128, 128, 0, 0, in[4] & 2, in[5] & 2, 0), t + 128, t + 132, acc);\n"
    "    fbt_commit(b);\n"
    "    fbt_commit_mc(b + 8, (uint16_t)(in[7] & 3));\n"
    "  }\n"
    "  __syncthreads(); fbt_fence_after();\n"
    "  uint32_t r[32];\n"
    "  fbt_ld_32x32b_x32(t + ((w * 32) << 16), r);\n"
    "  fbt_wait_ld();\n"
    "  uint32_t q[8];\n"
    "  for (int i = 0; i < 8; ++i) q[i] = r[i] ^ r[i + 8] ^ r[i + 16] ^ r[i + 24];\n"
    "  fbt_st_32x32b_x8(t + ((w * 32) << 16) + 64, q);\n"
    "  fbt_wait_st();\n"
    "  for (int i = 0; i < 32; ++i) out[threadIdx.x * 32 + i] = r[i];\n"
    "  fbt_fence_before(); __syncthreads();\n"
    "  if (w == 0) { fbt_dealloc(t, 256); fbt_relinquish(); }\n"
    "}\n"
    "extern \"C\" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(128) fb_tc_ops_forms_cg2(const unsigned *in, unsigned *out) {\n"
    "  __shared__ uint32_t slot[4];\n"
    "  __shared__ unsigned long long bar[2];\n"
    "  uint32_t s = (uint32_t)__cvta_generic_to_shared(slot), b = (uint32_t)__cvta_generic_to_shared(bar);\n"
    "  unsigned w = threadIdx.x / 32, acc = in[0] & 1;\n"
    "  if (w == 0) fbt_alloc_cg2(s, 512);\n"
    "  fbt_fence_before(); __syncthreads(); fbt_fence_after();\n"
    "  uint32_t t = slot[0];\n"
    "  uint64_t ad = fb_tc_sdesc(in[1] * 16, 16, 1024, FB_TC_SW128, 0, 0), bd = fb_tc_sdesc(in[2] * 16, 16, 1024, FB_TC_SW128, 0, 0);\n"
    "  if (w == 0 && fbt_elect_one()) {\n"
    "    fbt_cp_sf_cg2(t + 256, fb_tc_sdesc(in[3] * 16, 16, 128, FB_TC_SW_NONE, 0, 0));\n"
    "    fbt_mma_f16_cg2(t, ad, bd, fb_tc_idesc(FB_TC_BF16, FB_TC_BF16, FB_TC_D_F32, 256, 128, 0, 0), acc);\n"
    "    fbt_mma_mxf8_cg2(t, ad, bd, fb_tc_idesc_bs(FB_TC_E4M3, FB_TC_E4M3, 1, 256, 128, 0, 0, 0, 0, 0), t + 256, t + 260, acc);\n"
    "    fbt_mma_nvf4_cg2(t, ad, bd, fb_tc_idesc_bs(FB_TC_MXF4_E2M1, FB_TC_MXF4_E2M1, 0, 256, 256, 0, 0, 0, 0, in[6] & 1), t + 256, t + 260, acc);\n"
    "    fbt_mma_mxf4_cg2(t, ad, bd, fb_tc_idesc_bs(FB_TC_MXF4_E2M1, FB_TC_MXF4_E2M1, 1, 256, 256, 0, 0, in[4] & 3, in[5] & 3, in[6] & 1), t + 256, t + 260, acc);\n"
    "    fbt_commit_mc_cg2(b, (uint16_t)3);\n"
    "  }\n"
    "  __syncthreads(); fbt_fence_after();\n"
    "  uint32_t r[32];\n"
    "  fbt_ld_32x32b_x32(t + ((w * 32) << 16), r);\n"
    "  fbt_wait_ld();\n"
    "  for (int i = 0; i < 32; ++i) out[threadIdx.x * 32 + i] = r[i];\n"
    "  fbt_fence_before(); __syncthreads();\n"
    "  if (w == 0) { fbt_dealloc_cg2(t, 512); fbt_relinquish_cg2(); }\n"
    "}\n"
    /* the mbarrier, TMA, proxy-fence and cluster wrappers, on the dynamic shared memory */
    "extern \"C\" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(64) fb_tc_ops_sync(const __grid_constant__ fbt_tmap m, const unsigned *in, unsigned *out) {\n"
    "  unsigned char *sm = fbt_smem();\n"
    "  uint32_t base = fbt_smem_addr(sm), bar = base, rank = fbt_cluster_rank();\n"
    "  if (threadIdx.x == 0) { fbt_mbar_init(bar, 1); fbt_mbar_init(bar + 8, 2); fbt_fence_mbar_init(); }\n"
    "  fbt_cluster_sync();\n"
    "  if (threadIdx.x == 0) {\n"
    "    fbt_mbar_arrive_expect_tx(bar, in[0]);\n"
    "    fbt_tma_load_2d(base + 1024, &m, (int)in[1], (int)in[2], bar);\n"
    "    fbt_tma_load_3d(base + 2048, &m, (int)in[1], (int)in[2], (int)in[3], bar);\n"
    "    if (rank == 0) fbt_tma_load_2d_mc(base + 4096, &m, (int)in[1], (int)in[2], bar, (uint16_t)3);\n"
    "    fbt_mbar_wait(bar, 0);\n"
    "    fbt_mbar_arrive_cluster(fbt_mapa(bar + 8, 0));\n"
    "    fbt_mbar_arrive(bar + 8);\n"
    "  }\n"
    "  sm[8192 + threadIdx.x] = (unsigned char)in[4];\n"
    "  fbt_fence_proxy_async();\n"
    "  __syncthreads();\n"
    "  if (rank == 0 && threadIdx.x == 0) out[0] = fbt_mbar_try_wait(bar + 8, 0);\n"
    "  out[1 + threadIdx.x] = sm[1024 + threadIdx.x] + sm[8192 + (threadIdx.x ^ 1)];\n"
    "  fbt_cluster_sync();\n"
    "}\n";

static const char *cuobjdump(void) {
  static char path[4096];
  const char *e = getenv("CUOBJDUMP");
  if (e && access(e, X_OK) == 0) return e;
  FILE *p = popen("command -v cuobjdump 2>/dev/null || python3 -c 'import nvidia.cu13, os; "
                  "print(os.path.join(list(nvidia.cu13.__path__)[0], \"bin\", \"cuobjdump\"))' 2>/dev/null",
                  "r");
  if (!p) return NULL;
  int ok = fgets(path, sizeof path, p) != NULL;
  pclose(p);
  if (!ok) return NULL;
  path[strcspn(path, "\n")] = 0;
  return access(path, X_OK) == 0 ? path : NULL;
}

static void test_forms(void **state) {
  (void)state;
  static const char *const archs[] = {"sm_100a", "sm_103a"};
  const char *co = cuobjdump();
  for (int a = 0; a < 2; ++a) {
    fb_cubin c;
    memset(&c, 0, sizeof c);
    if (fb_nvrtc_compile("fb_tc_ops_forms", SRC, archs[a], &c) != FB_OK) fail_msg("%s: %s", archs[a], fb_errmsg());
    assert_true(c.size > 1000);
    if (c.ptxas) { /* ptxas's report, when it ran (not a compute-cache answer) */
      assert_null(strstr(c.log, "bytes spill stores") && !strstr(c.log, "0 bytes spill stores") ? c.log : NULL);
    }
    if (!co) { /* make check, without the test-only wheel: said, and failed where make test requires it */
      printf("  %s: compiled (%zu bytes); the SASS check did not run: no cuobjdump (set CUOBJDUMP)\n", archs[a], c.size);
      if (getenv("FB_REQUIRE_SASS")) fail_msg("FB_REQUIRE_SASS: no cuobjdump");
      fb_cubin_free(&c);
      continue;
    }
    char f[] = "/tmp/fb_tc_ops_XXXXXX";
    int fd = mkstemp(f);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, c.cubin, c.size), (long)c.size);
    close(fd);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' -sass '%s'", co, f);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    static char sass[1 << 20];
    size_t n = fread(sass, 1, sizeof sass - 1, p);
    sass[n] = 0;
    pclose(p);
    unlink(f);
    /* as cuobjdump 13 spells them: kind::f16 UTCHMMA, mxf8f6f4 UTCQMMA, mxf4nvf4 block16 UTCOMMA.4X (sm_100a) or
       UTCOMMA.BLOCK16 (sm_103a), mxf4nvf4 block32 a bare UTCOMMA (both archs, as cuobjdump 13.5 printed it,
       2026-12-07), each also .2CTA; commit UTCBAR (.MULTICAST, .2CTA.MULTICAST); cp UTCCP; ld / st LDTM / STTM;
       alloc the allocator's atomics; TMA UTMALDG, mbarriers SYNCS.*, barrier.cluster UCGABAR_*, fence.proxy.async
       FENCE.VIEW.ASYNC.S (as cuobjdump 13.5 printed them, 2026-12-02) */
    const char *nvf4 = a ? "UTCOMMA.BLOCK16" : "UTCOMMA.4X", *nvf4_2 = a ? "UTCOMMA.2CTA.BLOCK16" : "UTCOMMA.2CTA.4X";
    const char *const want[] = {"UTCHMMA ", "UTCHMMA.2CTA", "UTCQMMA ", "UTCQMMA.2CTA", nvf4, nvf4_2, "UTCOMMA ",
                                "UTCOMMA.2CTA ", "UTCBAR ", "UTCBAR.MULTICAST",
                                "UTCBAR.2CTA.MULTICAST", "UTCCP.T.S", "UTCCP.T.S.2CTA", "LDTM", "STTM",
                                "UTCATOMSWS.FIND_AND_SET", "UTCATOMSWS.2CTA.FIND_AND_SET", "DEALLOC",
                                /* fb_tc_ops_sync: TMA loads, mbarrier init / arrive (remote: .RED) / try_wait, the
                                   cluster barrier, fence.proxy.async */
                                "UTMALDG.2D ", "UTMALDG.3D ", "UTMALDG.2D.MULTICAST", "SYNCS.EXCH.64",
                                "SYNCS.ARRIVE.TRANS64.RED.A1T0", "SYNCS.PHASECHK.TRANS64.TRYWAIT", "UCGABAR_ARV",
                                "UCGABAR_WAIT", "FENCE.VIEW.ASYNC.S"};
    int missing = 0;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; ++i)
      if (!strstr(sass, want[i])) printf("  %s: no %s in the SASS\n", archs[a], want[i]), ++missing;
    assert_null(strstr(sass, "LDL") ? "LDL (local memory)" : NULL);
    assert_null(strstr(sass, "STL ") ? "STL (local memory)" : NULL);
    printf("  %s: compiled (%zu bytes), SASS read with %s: %s\n", archs[a], c.size, co, missing ? "instructions missing" : "every form found");
    assert_int_equal(missing, 0);
    fb_cubin_free(&c);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_forms)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
