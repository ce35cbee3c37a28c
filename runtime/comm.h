/* comm.h — the ranks of an expert-parallel run and what passes between them (docs/design.md "Runtime": expert
 * parallelism, one process per GPU).
 *
 * Entry points: fb_comm_init_env, fb_comm_single, fb_comm_free, fb_comm_rank, fb_comm_size, fb_comm_alltoallv,
 * fb_comm_allgather, fb_comm_allreduce_f32, fb_comm_barrier, fb_comm_bcast; launcher side fb_comm_mesh_create,
 * fb_comm_mesh_child; NCCL (device buffers) fb_comm_nccl_unique_id, fb_comm_nccl_init, fb_comm_dev_alltoallv,
 * fb_comm_dev_allreduce_f32.
 *
 * Two transports, one communicator:
 *   host   a full mesh of stream sockets between the processes, for host memory. Made either by the launcher
 *          (`fourbit train --ranks N` / `--gpus N`: socketpair()s created before fork; each child finds its ends in
 *          FOURBIT_COMM_FDS) or, when the processes were started by someone else (torchrun-style RANK, WORLD_SIZE,
 *          LOCAL_RANK, MASTER_ADDR, MASTER_PORT), by a TCP rendezvous at MASTER_ADDR:MASTER_PORT (default
 *          127.0.0.1:29500). Every collective is SPMD: all ranks call the same collectives in the same order;
 *          each message carries a header (sequence number, length) that the receiver checks, so a mismatch is an
 *          error, not corrupt data. A peer that exits closes its sockets: the others get FB_EIO naming it.
 *          Reductions sum in rank order 0, 1, ..., N-1 on every rank, so every rank holds the same bits.
 *   NCCL   libnccl.so.2 loaded with dlopen at fb_comm_nccl_init (no link-time dependency), for device memory:
 *          grouped ncclSend/ncclRecv (all-to-all-v) and ncclAllReduce on a caller's stream. The unique id comes
 *          from the launcher (FOURBIT_NCCL_ID, hex) or rank 0 makes one and broadcasts it over the host mesh.
 *          NCCL does not run on the CPU machines; it compiles there, and one rank works on one GPU.
 *
 * What the GPU expert layer (runtime/experts_gpu.c) calls, per step and layer, with EP over N ranks:
 *   0. once, after making its CUDA context current on device LOCAL_RANK (fb_comm_local_rank(), not GPU 0):
 *      fb_comm_nccl_init(comm).
 *   1. routing counts: each rank counts its tokens' (token, expert) pairs per expert and exchanges them with
 *      fb_comm_allgather (host, E int32 per rank) — every rank then knows how many rows it sends to and receives
 *      from every peer, and the global padded row offsets that key the SR streams (model_experts.c, "EP").
 *   2. dispatch: the quantized payload rows, packed on the device per destination rank in (expert, token) order,
 *      one plane after the other or interleaved as one row record (codes, block scales, the per-token FP32 outer
 *      scale); fb_comm_dev_alltoallv(comm, send, scount, sdispl, recv, rcount, rdispl, stream) with byte counts
 *      per peer (host arrays), send/recv device pointers (CUdeviceptr cast to void *), on the stream that
 *      produced the payload: NCCL orders the transfer after the quantizer and the GEMM after the transfer.
 *   3. combine: the S2F6 (+RHT) rows back, the same call with the counts swapped.
 *   4. backward: dY rows out (BF16) and dX rows back (BF16), the same call.
 *   Host-side state (the router, the loss, the non-expert parameters, which live on the host in this runtime)
 *   goes over the host mesh; nothing else in the GPU path needs NCCL. With N = 1 the NCCL calls are a copy
 *   to self, and the expert layer may skip them. */
#ifndef FB_COMM_H
#define FB_COMM_H
#include "fourbit.h"
#include <stddef.h>

typedef struct fb_comm fb_comm;

/* The communicator of this process from the environment: WORLD_SIZE unset or 1 -> one rank (no sockets);
 * else RANK (0 <= RANK < WORLD_SIZE), LOCAL_RANK (default RANK), and FOURBIT_COMM_FDS (from the launcher) or
 * MASTER_ADDR/MASTER_PORT (TCP rendezvous, 120 s to gather). FB_EINVAL naming the variable when malformed. */
fb_status fb_comm_init_env(fb_comm **out);
/* A one-rank communicator (every collective is a copy to self). */
fb_status fb_comm_single(fb_comm **out);
void fb_comm_free(fb_comm *c);
int fb_comm_rank(const fb_comm *c);
int fb_comm_size(const fb_comm *c);
int fb_comm_local_rank(const fb_comm *c);

/* All-to-all-v over the host mesh: scount[p] bytes from send + sdispl[p] go to rank p, which receives them at
 * its recv + rdispl[me] (rcount[q] bytes from rank q). The counts must agree pairwise (checked). */
fb_status fb_comm_alltoallv(fb_comm *c, const void *send, const size_t *scount, const size_t *sdispl, void *recv,
                            const size_t *rcount, const size_t *rdispl);
/* every rank's n bytes, in rank order: all holds size * n bytes. */
fb_status fb_comm_allgather(fb_comm *c, const void *mine, size_t n, void *all);
/* In place: x = sum over ranks, added in rank order (identical bits on every rank). */
fb_status fb_comm_allreduce_f32(fb_comm *c, float *x, size_t n);
fb_status fb_comm_barrier(fb_comm *c);
fb_status fb_comm_bcast(fb_comm *c, void *buf, size_t n, int root);
/* Bytes this process sent to other ranks over the host mesh so far (payload, not headers). */
unsigned long long fb_comm_bytes_sent(const fb_comm *c);

/* ---- launcher side ---- */
/* n ranks: fds[i * n + j] is rank i's socket to rank j (-1 on the diagonal); socketpairs, not close-on-exec. */
fb_status fb_comm_mesh_create(int n, int *fds);
/* In the child of rank `rank` before exec: close the other ranks' ends and export FOURBIT_COMM_FDS. */
fb_status fb_comm_mesh_child(int n, int rank, int *fds);
/* The launcher's NCCL id for its workers: FOURBIT_NCCL_ID=<256 hex digits> in the environment (loads NCCL). */
fb_status fb_comm_nccl_unique_id_env(void);

/* ---- NCCL: device buffers ---- */
/* Loads libnccl.so.2 (dlopen, as every NCCL call here) and returns ncclGetVersion's code (e.g. 22703 for 2.27.3);
 * FB_ENCCL, with dlopen's reason, where there is no NCCL: `fourbit info` says "not found" and goes on. */
fb_status fb_comm_nccl_version(int *version);
/* Loads libnccl.so.2 and makes the NCCL communicator of these ranks on the current CUDA device. The caller has
 * made its context current on device fb_comm_local_rank(c). Collective over the ranks. Under a CUDA driver whose
 * device memory is host memory (the fake libcuda.so.1 of tests/gpu/mock_libcuda.c, which exports
 * fbmock_device_memory_is_host) no NCCL is loaded: the device collectives below run over the host mesh on the
 * same pointers (how `make test` runs the GPU expert layer's exchanges with N ranks without GPUs). */
fb_status fb_comm_nccl_init(fb_comm *c);
/* 1 when fb_comm_nccl_init chose the host mesh for device pointers (the fake driver), 0 with NCCL. */
int fb_comm_dev_is_host(const fb_comm *c);
/* fb_comm_alltoallv on device pointers (bytes, ncclUint8) as one ncclGroupStart/End of ncclSend/ncclRecv, on
 * `stream` (a CUstream / cudaStream_t); asynchronous like any NCCL call. */
fb_status fb_comm_dev_alltoallv(fb_comm *c, const void *send, const size_t *scount, const size_t *sdispl, void *recv,
                                const size_t *rcount, const size_t *rdispl, void *stream);
/* ncclAllReduce(sum, float) in place on `stream`. */
fb_status fb_comm_dev_allreduce_f32(fb_comm *c, float *x, size_t n, void *stream);
#endif
