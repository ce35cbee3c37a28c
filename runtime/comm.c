/* comm.c — the communicator of comm.h: a socket mesh for host memory (made by the launcher's socketpairs or by
 * a TCP rendezvous), NCCL through dlopen for device memory.
 *
 * Entry points: see comm.h.
 *
 * The host transport moves every collective as one message per (sender, receiver) pair, each preceded by a
 * 16-byte header (magic, sequence number of the collective, length) that the receiver checks against what it
 * expects. All sockets are non-blocking and one poll() loop drives every send and receive of a collective at
 * once, so no pair of ranks can block each other on full socket buffers. */
#include "comm.h"
#include "fb_error.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nccl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HDR_MAGIC 0x4D434246u /* "FBCM" */
#define RDV_SECONDS 120

struct fb_comm {
  int rank, size, local;
  int *fd;        /* size entries: the socket to each peer, -1 for self */
  uint32_t seq;   /* collectives so far */
  unsigned long long sent;
  ncclComm_t nc;  /* NULL until fb_comm_nccl_init */
  int dev_host;   /* the driver's device memory is host memory (a test driver): device collectives go over the mesh */
};

/* ---- setup ---------------------------------------------------------------------------------------------- */
static fb_status alloc_comm(int rank, int size, int local, fb_comm **out) {
  fb_comm *c = calloc(1, sizeof *c);
  if (!c || !(c->fd = malloc((size_t)size * sizeof *c->fd))) { free(c); return FB_ERR(FB_ENOMEM, "communicator"); }
  for (int i = 0; i < size; ++i) c->fd[i] = -1;
  c->rank = rank, c->size = size, c->local = local;
  *out = c;
  return FB_OK;
}

fb_status fb_comm_single(fb_comm **out) { return alloc_comm(0, 1, 0, out); }

static void nccl_destroy(fb_comm *c);
void fb_comm_free(fb_comm *c) {
  if (!c) return;
  nccl_destroy(c);
  for (int i = 0; i < c->size; ++i)
    if (c->fd[i] >= 0) close(c->fd[i]);
  free(c->fd);
  free(c);
}
int fb_comm_rank(const fb_comm *c) { return c->rank; }
int fb_comm_size(const fb_comm *c) { return c->size; }
int fb_comm_local_rank(const fb_comm *c) { return c->local; }
unsigned long long fb_comm_bytes_sent(const fb_comm *c) { return c->sent; }

static int env_int(const char *name, int dflt, int lo, int hi, int *out) {
  const char *s = getenv(name);
  if (!s || !*s) { *out = dflt; return 0; }
  char *end;
  long v = strtol(s, &end, 10);
  if (*end || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

static fb_status set_nonblocking(fb_comm *c) {
  for (int p = 0; p < c->size; ++p) {
    if (c->fd[p] < 0) continue;
    int fl = fcntl(c->fd[p], F_GETFL);
    if (fl < 0 || fcntl(c->fd[p], F_SETFL, fl | O_NONBLOCK) < 0 || fcntl(c->fd[p], F_SETFD, FD_CLOEXEC) < 0)
      return FB_ERR(FB_EIO, "rank %d: socket to rank %d: %s", c->rank, p, strerror(errno));
  }
  return FB_OK;
}

/* blocking helpers for the rendezvous */
static int wr_all(int fd, const void *p, size_t n) {
  const uint8_t *b = p;
  while (n) {
    ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    b += w, n -= (size_t)w;
  }
  return 0;
}
static int rd_all(int fd, void *p, size_t n) {
  uint8_t *b = p;
  while (n) {
    ssize_t r = read(fd, b, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    b += r, n -= (size_t)r;
  }
  return 0;
}

static int listen_on(uint16_t port, uint16_t *bound) {
  int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  if (s < 0) return -1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET, a.sin_addr.s_addr = htonl(INADDR_ANY), a.sin_port = htons(port);
  socklen_t len = sizeof a;
  if (bind(s, (struct sockaddr *)&a, sizeof a) || listen(s, 128) || getsockname(s, (struct sockaddr *)&a, &len)) {
    close(s);
    return -1;
  }
  *bound = ntohs(a.sin_port);
  return s;
}

/* accept with a deadline; -1 on time-out or error */
static int accept_by(int ls, time_t deadline) {
  for (;;) {
    int left = (int)(deadline - time(NULL));
    if (left <= 0) return -1;
    struct pollfd p = {ls, POLLIN, 0};
    int r = poll(&p, 1, left * 1000);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    int s = accept(ls, NULL, NULL);
    if (s >= 0) { /* small messages both ways (barriers, row counts): without it Nagle holds them up to ~40 ms */
      int one = 1;
      setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return s;
    }
    if (errno != EINTR && errno != ECONNABORTED) return -1;
  }
}

static int connect_by(const struct sockaddr_in *a, time_t deadline) {
  for (;;) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) return -1;
    if (connect(s, (const struct sockaddr *)a, sizeof *a) == 0) {
      int one = 1;
      setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return s;
    }
    close(s);
    if (time(NULL) >= deadline) return -1;
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

/* torchrun-style: rank 0 listens at MASTER_ADDR:MASTER_PORT; every other rank reports (rank, the port of its own
 * listener) to it and gets the table back; then rank j connects to every rank 0 < i < j. IPv4. */
static fb_status tcp_mesh(fb_comm *c) {
  const char *host = getenv("MASTER_ADDR");
  int port;
  if (!host || !*host) host = "127.0.0.1";
  if (env_int("MASTER_PORT", 29500, 1, 65535, &port)) return FB_USERERR(FB_EINVAL, "MASTER_PORT: not a port number");
  int n = c->size, me = c->rank, ls = -1;
  time_t deadline = time(NULL) + RDV_SECONDS;
  struct sockaddr_in *tab = calloc((size_t)n, sizeof *tab);
  fb_status rc = FB_OK;
  if (!tab) return FB_ERR(FB_ENOMEM, "rendezvous");
  struct addrinfo hints = {0}, *ai = NULL;
  hints.ai_family = AF_INET, hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host, NULL, &hints, &ai) || !ai) {
    rc = FB_USERERR(FB_EINVAL, "MASTER_ADDR %s: cannot resolve it (IPv4)", host);
    goto out;
  }
  struct sockaddr_in master = *(struct sockaddr_in *)ai->ai_addr;
  master.sin_port = htons((uint16_t)port);
  freeaddrinfo(ai);
  uint16_t myport = 0;
  ls = listen_on(me == 0 ? (uint16_t)port : 0, &myport);
  if (ls < 0) { rc = FB_ERR(FB_EIO, "rank %d: cannot listen on port %d: %s", me, me ? 0 : port, strerror(errno)); goto out; }
  if (me == 0) {
    for (int k = 1; k < n; ++k) {
      int s = accept_by(ls, deadline);
      uint32_t msg[2];
      struct sockaddr_in pa;
      socklen_t pl = sizeof pa;
      if (s < 0) { rc = FB_ERR(FB_EIO, "rank 0: %d of %d ranks reached %s:%d within %d s", k - 1, n - 1, host, port, RDV_SECONDS); goto out; }
      if (rd_all(s, msg, sizeof msg) || msg[0] < 1 || msg[0] >= (uint32_t)n || c->fd[msg[0]] >= 0 ||
          getpeername(s, (struct sockaddr *)&pa, &pl)) {
        close(s);
        rc = FB_ERR(FB_EIO, "rank 0: a bad or duplicate rank in the rendezvous (WORLD_SIZE %d)", n);
        goto out;
      }
      c->fd[msg[0]] = s;
      tab[msg[0]] = pa, tab[msg[0]].sin_port = htons((uint16_t)msg[1]);
    }
    for (int k = 1; k < n; ++k)
      if (wr_all(c->fd[k], tab, (size_t)n * sizeof *tab)) { rc = FB_ERR(FB_EIO, "rank 0: rendezvous with rank %d", k); goto out; }
  } else {
    int s = connect_by(&master, deadline);
    uint32_t msg[2] = {(uint32_t)me, myport};
    if (s < 0) { rc = FB_ERR(FB_EIO, "rank %d: cannot reach rank 0 at %s:%d within %d s", me, host, port, RDV_SECONDS); goto out; }
    c->fd[0] = s;
    if (wr_all(s, msg, sizeof msg) || rd_all(s, tab, (size_t)n * sizeof *tab)) {
      rc = FB_ERR(FB_EIO, "rank %d: rendezvous with rank 0 failed", me);
      goto out;
    }
    for (int i = 1; i < me; ++i) {
      int t = connect_by(&tab[i], deadline);
      uint32_t r = (uint32_t)me;
      if (t < 0 || wr_all(t, &r, 4)) { if (t >= 0) close(t); rc = FB_ERR(FB_EIO, "rank %d: cannot connect to rank %d", me, i); goto out; }
      c->fd[i] = t;
    }
    for (int k = me + 1; k < n; ++k) {
      int t = accept_by(ls, deadline);
      uint32_t r;
      if (t < 0 || rd_all(t, &r, 4) || r <= (uint32_t)me || r >= (uint32_t)n || c->fd[r] >= 0) {
        if (t >= 0) close(t);
        rc = FB_ERR(FB_EIO, "rank %d: the ranks above it did not all connect within %d s", me, RDV_SECONDS);
        goto out;
      }
      c->fd[r] = t;
    }
  }
out:
  if (ls >= 0) close(ls);
  free(tab);
  return rc;
}

fb_status fb_comm_init_env(fb_comm **out) {
  *out = NULL;
  int size, rank, local;
  if (env_int("WORLD_SIZE", 1, 1, 4096, &size)) return FB_USERERR(FB_EINVAL, "WORLD_SIZE: not a number in [1, 4096]");
  if (env_int("RANK", 0, 0, size - 1, &rank))
    return FB_USERERR(FB_EINVAL, "RANK: not a number in [0, WORLD_SIZE %d)", size);
  if (env_int("LOCAL_RANK", rank, 0, 4095, &local)) return FB_USERERR(FB_EINVAL, "LOCAL_RANK: not a number");
  if (size > 1 && !getenv("RANK")) return FB_USERERR(FB_EINVAL, "WORLD_SIZE is %d but RANK is not set", size);
  fb_comm *c = NULL;
  FB_TRY(alloc_comm(rank, size, local, &c));
  fb_status rc = FB_OK;
  if (size == 1) goto done;
  const char *fds = getenv("FOURBIT_COMM_FDS");
  if (fds && *fds) {
    const char *p = fds;
    for (int i = 0; i < size; ++i) {
      char *end;
      long v = strtol(p, &end, 10);
      if (end == p || (i < size - 1 ? *end != ',' : *end != 0) || (i == rank) != (v == -1) ||
          (v != -1 && fcntl((int)v, F_GETFD) < 0)) {
        rc = FB_USERERR(FB_EINVAL, "FOURBIT_COMM_FDS: '%s' is not %d open sockets (-1 at RANK %d)", fds, size, rank);
        for (int k = 0; k < i; ++k) c->fd[k] = -1; /* not ours to close */
        goto done;
      }
      c->fd[i] = (int)v;
      p = end + 1;
    }
  } else {
    FB_TRY_GOTO(tcp_mesh(c), done);
  }
  rc = set_nonblocking(c);
done:
  if (rc != FB_OK) { fb_comm_free(c); return rc; }
  *out = c;
  return FB_OK;
}

fb_status fb_comm_mesh_create(int n, int *fds) {
  for (int i = 0; i < n * n; ++i) fds[i] = -1;
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j) {
      int sv[2];
      if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
        fb_status s = FB_ERR(FB_EIO, "socketpair for ranks %d and %d: %s", i, j, strerror(errno));
        for (int k = 0; k < n * n; ++k)
          if (fds[k] >= 0) close(fds[k]), fds[k] = -1;
        return s;
      }
      fds[i * n + j] = sv[0], fds[j * n + i] = sv[1];
    }
  return FB_OK;
}

fb_status fb_comm_mesh_child(int n, int rank, int *fds) {
  size_t cap = (size_t)n * 12 + 1;
  char *s = malloc(cap), *p = s;
  if (!s) return FB_ERR(FB_ENOMEM, "FOURBIT_COMM_FDS");
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (i != rank && fds[i * n + j] >= 0) close(fds[i * n + j]);
  for (int j = 0; j < n; ++j) p += snprintf(p, cap - (size_t)(p - s), "%s%d", j ? "," : "", fds[rank * n + j]);
  int r = setenv("FOURBIT_COMM_FDS", s, 1);
  free(s);
  return r ? FB_ERR(FB_EIO, "setenv FOURBIT_COMM_FDS") : FB_OK;
}

/* ---- the host transport -------------------------------------------------------------------------------- */
typedef struct {
  int sdo, rdo;              /* a message to / from this peer in this collective */
  const uint8_t *sp;         /* body to send */
  uint8_t *rp;               /* where the body goes */
  size_t slen, rlen, soff, roff; /* offsets count the 16-byte header first */
  uint32_t shdr[4], rhdr[4];
} peer_io;

static fb_status peer_lost(const fb_comm *c, int p, const char *how) {
  return FB_ERR(FB_EIO, "rank %d: lost rank %d (%s: it exited or was killed)", c->rank, p, how);
}

/* One collective's messages with every peer; io[p] for p != rank. */
static fb_status exchange(fb_comm *c, peer_io *io) {
  int n = c->size, me = c->rank;
  uint32_t seq = ++c->seq;
  struct pollfd *pf = malloc((size_t)n * sizeof *pf);
  int *who = malloc((size_t)n * sizeof *who);
  fb_status rc = FB_OK;
  if (!pf || !who) { rc = FB_ERR(FB_ENOMEM, "communicator"); goto out; }
  for (int p = 0; p < n; ++p) {
    peer_io *q = &io[p];
    q->soff = q->roff = 0;
    uint64_t len = q->slen;
    q->shdr[0] = HDR_MAGIC, q->shdr[1] = seq, memcpy(&q->shdr[2], &len, 8);
    if (p == me) q->sdo = q->rdo = 0;
  }
  for (;;) {
    int m = 0;
    for (int p = 0; p < n; ++p) {
      peer_io *q = &io[p];
      short ev = (short)((q->sdo && q->soff < 16 + q->slen ? POLLOUT : 0) | (q->rdo && q->roff < 16 + q->rlen ? POLLIN : 0));
      if (ev) pf[m].fd = c->fd[p], pf[m].events = ev, pf[m].revents = 0, who[m++] = p;
    }
    if (!m) break;
    int r = poll(pf, (nfds_t)m, -1);
    if (r < 0) {
      if (errno == EINTR) continue;
      rc = FB_ERR(FB_EIO, "rank %d: poll: %s", me, strerror(errno));
      goto out;
    }
    for (int k = 0; k < m; ++k) {
      int p = who[k];
      peer_io *q = &io[p];
      short re = pf[k].revents;
      if ((re & (POLLIN | POLLHUP | POLLERR)) && (pf[k].events & POLLIN)) {
        uint8_t *dst = q->roff < 16 ? (uint8_t *)q->rhdr + q->roff : q->rp + (q->roff - 16);
        size_t want = q->roff < 16 ? 16 - q->roff : q->rlen - (q->roff - 16);
        ssize_t got = read(c->fd[p], dst, want);
        if (got == 0) { rc = peer_lost(c, p, "connection closed"); goto out; }
        if (got < 0 && errno != EAGAIN && errno != EINTR) { rc = peer_lost(c, p, strerror(errno)); goto out; }
        if (got > 0) {
          q->roff += (size_t)got;
          if (q->roff == 16) {
            uint64_t len;
            memcpy(&len, &q->rhdr[2], 8);
            if (q->rhdr[0] != HDR_MAGIC || q->rhdr[1] != seq || len != q->rlen) {
              rc = FB_ERR(FB_EIO, "rank %d: collective %u: rank %d sent collective %u of %llu bytes, %zu expected "
                          "(the ranks disagree on the counts or the order of collectives)", me, seq, p, q->rhdr[1],
                          (unsigned long long)len, q->rlen);
              goto out;
            }
          }
        }
      }
      if ((re & (POLLOUT | POLLERR | POLLHUP)) && (pf[k].events & POLLOUT)) {
        const uint8_t *src = q->soff < 16 ? (const uint8_t *)q->shdr + q->soff : q->sp + (q->soff - 16);
        size_t want = q->soff < 16 ? 16 - q->soff : q->slen - (q->soff - 16);
        ssize_t w = send(c->fd[p], src, want, MSG_NOSIGNAL);
        if (w < 0 && errno != EAGAIN && errno != EINTR) { rc = peer_lost(c, p, strerror(errno)); goto out; }
        if (w > 0) {
          if (q->soff >= 16) c->sent += (unsigned long long)w;
          else if (q->soff + (size_t)w > 16) c->sent += (unsigned long long)(q->soff + (size_t)w - 16);
          q->soff += (size_t)w;
        }
      }
    }
  }
out:
  free(pf), free(who);
  return rc;
}

fb_status fb_comm_alltoallv(fb_comm *c, const void *send, const size_t *scount, const size_t *sdispl, void *recv,
                            const size_t *rcount, const size_t *rdispl) {
  int n = c->size, me = c->rank;
  if (scount[me] != rcount[me])
    return FB_ERR(FB_EINVAL, "alltoallv: rank %d sends %zu bytes to itself and expects %zu", me, scount[me], rcount[me]);
  if (scount[me]) memmove((uint8_t *)recv + rdispl[me], (const uint8_t *)send + sdispl[me], scount[me]);
  if (n == 1) return FB_OK;
  peer_io *io = calloc((size_t)n, sizeof *io);
  if (!io) return FB_ERR(FB_ENOMEM, "alltoallv");
  for (int p = 0; p < n; ++p) {
    io[p].sdo = io[p].rdo = 1;
    io[p].sp = (const uint8_t *)send + sdispl[p], io[p].slen = scount[p];
    io[p].rp = (uint8_t *)recv + rdispl[p], io[p].rlen = rcount[p];
  }
  fb_status rc = exchange(c, io);
  free(io);
  return rc;
}

fb_status fb_comm_allgather(fb_comm *c, const void *mine, size_t n, void *all) {
  int N = c->size;
  size_t *a = malloc(4 * (size_t)N * sizeof *a);
  if (!a) return FB_ERR(FB_ENOMEM, "allgather");
  size_t *sc = a, *sd = a + N, *rc_ = a + 2 * N, *rd = a + 3 * N;
  for (int p = 0; p < N; ++p) sc[p] = n, sd[p] = 0, rc_[p] = n, rd[p] = (size_t)p * n;
  fb_status s = fb_comm_alltoallv(c, mine, sc, sd, all, rc_, rd);
  free(a);
  return s;
}

fb_status fb_comm_allreduce_f32(fb_comm *c, float *x, size_t n) {
  int N = c->size;
  if (N == 1 || n == 0) return FB_OK;
  float *all = malloc((size_t)N * n * sizeof *all);
  if (!all) return FB_ERR(FB_ENOMEM, "allreduce: %zu floats x %d ranks", n, N);
  fb_status s = fb_comm_allgather(c, x, n * sizeof *x, all);
  if (s == FB_OK)
    for (size_t i = 0; i < n; ++i) {
      float acc = all[i];
      for (int q = 1; q < N; ++q) acc += all[(size_t)q * n + i];
      x[i] = acc;
    }
  free(all);
  return s;
}

fb_status fb_comm_barrier(fb_comm *c) {
  if (c->size == 1) return FB_OK;
  uint8_t one = 1, *all = malloc((size_t)c->size);
  if (!all) return FB_ERR(FB_ENOMEM, "barrier");
  fb_status s = fb_comm_allgather(c, &one, 1, all);
  free(all);
  return s;
}

fb_status fb_comm_bcast(fb_comm *c, void *buf, size_t n, int root) {
  int N = c->size;
  if (root < 0 || root >= N) return FB_ERR(FB_EINVAL, "bcast: root %d of %d ranks", root, N);
  if (N == 1) return FB_OK;
  peer_io *io = calloc((size_t)N, sizeof *io);
  if (!io) return FB_ERR(FB_ENOMEM, "bcast");
  for (int p = 0; p < N; ++p) {
    if (c->rank == root) io[p].sdo = 1, io[p].sp = buf, io[p].slen = n;
    else if (p == root) io[p].rdo = 1, io[p].rp = buf, io[p].rlen = n;
  }
  fb_status rc = exchange(c, io);
  free(io);
  return rc;
}

/* ---- NCCL ---------------------------------------------------------------------------------------------- */
static struct {
  void *lib;
  ncclResult_t (*GetUniqueId)(ncclUniqueId *);
  ncclResult_t (*CommInitRank)(ncclComm_t *, int, ncclUniqueId, int);
  ncclResult_t (*CommDestroy)(ncclComm_t);
  ncclResult_t (*Send)(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Recv)(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*AllReduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*GroupStart)(void);
  ncclResult_t (*GroupEnd)(void);
  const char *(*GetErrorString)(ncclResult_t);
  ncclResult_t (*GetVersion)(int *);
} nc;

#define NC_CHECK(call) do { ncclResult_t fb_r_ = (call); if (fb_r_ != ncclSuccess) \
  return FB_ERR(FB_ENCCL, "%s: %s", #call, nc.GetErrorString(fb_r_)); } while (0)

static fb_status nccl_load(void) {
  if (nc.lib) return FB_OK;
  void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!h) return FB_ERR(FB_ENCCL, "dlopen libnccl.so.2: %s", dlerror());
#define SYM(f) if (!(*(void **)&nc.f = dlsym(h, "nccl" #f))) { dlclose(h); return FB_ERR(FB_ENCCL, "libnccl.so.2: no nccl%s", #f); }
  SYM(GetUniqueId) SYM(CommInitRank) SYM(CommDestroy) SYM(Send) SYM(Recv) SYM(AllReduce) SYM(GroupStart) SYM(GroupEnd)
  SYM(GetErrorString) SYM(GetVersion)
#undef SYM
  nc.lib = h;
  return FB_OK;
}

static void nccl_destroy(fb_comm *c) {
  if (c->nc && nc.lib) nc.CommDestroy(c->nc);
  c->nc = NULL;
}

fb_status fb_comm_nccl_version(int *version) {
  *version = 0;
  FB_TRY(nccl_load());
  NC_CHECK(nc.GetVersion(version));
  return FB_OK;
}

fb_status fb_comm_nccl_unique_id_env(void) {
  FB_TRY(nccl_load());
  ncclUniqueId id;
  NC_CHECK(nc.GetUniqueId(&id));
  char hex[2 * sizeof id.internal + 1];
  for (size_t i = 0; i < sizeof id.internal; ++i) snprintf(hex + 2 * i, 3, "%02x", (unsigned char)id.internal[i]);
  return setenv("FOURBIT_NCCL_ID", hex, 1) ? FB_ERR(FB_EIO, "setenv FOURBIT_NCCL_ID") : FB_OK;
}

/* A CUDA driver whose device memory is host memory says so by exporting fbmock_device_memory_is_host
 * (tests/gpu/mock_libcuda.c, the fake libcuda.so.1 of the CPU machines). */
static int driver_memory_is_host(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h) return 0;
  int r = dlsym(h, "fbmock_device_memory_is_host") != NULL;
  dlclose(h);
  return r;
}

int fb_comm_dev_is_host(const fb_comm *c) { return c->dev_host; }

fb_status fb_comm_nccl_init(fb_comm *c) {
  if (c->nc || c->dev_host) return FB_OK;
  if (driver_memory_is_host()) { /* no NCCL: the device collectives are the host mesh's on these pointers */
    c->dev_host = 1;
    return FB_OK;
  }
  FB_TRY(nccl_load());
  ncclUniqueId id;
  const char *hex = getenv("FOURBIT_NCCL_ID");
  if (hex && *hex) {
    if (strlen(hex) != 2 * sizeof id.internal) return FB_USERERR(FB_EINVAL, "FOURBIT_NCCL_ID: not %zu hex digits", 2 * sizeof id.internal);
    for (size_t i = 0; i < sizeof id.internal; ++i) {
      unsigned v;
      if (sscanf(hex + 2 * i, "%2x", &v) != 1) return FB_USERERR(FB_EINVAL, "FOURBIT_NCCL_ID: not hex");
      id.internal[i] = (char)v;
    }
  } else {
    if (c->rank == 0) NC_CHECK(nc.GetUniqueId(&id));
    FB_TRY(fb_comm_bcast(c, &id, sizeof id, 0));
  }
  NC_CHECK(nc.CommInitRank(&c->nc, c->size, id, c->rank));
  return FB_OK;
}

fb_status fb_comm_dev_alltoallv(fb_comm *c, const void *send, const size_t *scount, const size_t *sdispl, void *recv,
                                const size_t *rcount, const size_t *rdispl, void *stream) {
  if (c->dev_host) return fb_comm_alltoallv(c, send, scount, sdispl, recv, rcount, rdispl);
  if (!c->nc) return FB_ERR(FB_EINVAL, "dev_alltoallv: fb_comm_nccl_init was not called");
  cudaStream_t st = (cudaStream_t)stream;
  NC_CHECK(nc.GroupStart());
  for (int p = 0; p < c->size; ++p) {
    ncclResult_t r = ncclSuccess;
    if (scount[p]) r = nc.Send((const uint8_t *)send + sdispl[p], scount[p], ncclUint8, p, c->nc, st);
    if (r == ncclSuccess && rcount[p]) r = nc.Recv((uint8_t *)recv + rdispl[p], rcount[p], ncclUint8, p, c->nc, st);
    if (r != ncclSuccess) {
      nc.GroupEnd();
      return FB_ERR(FB_ENCCL, "ncclSend/ncclRecv with rank %d: %s", p, nc.GetErrorString(r));
    }
  }
  NC_CHECK(nc.GroupEnd());
  return FB_OK;
}

fb_status fb_comm_dev_allreduce_f32(fb_comm *c, float *x, size_t n, void *stream) {
  if (c->dev_host) return fb_comm_allreduce_f32(c, x, n);
  if (!c->nc) return FB_ERR(FB_EINVAL, "dev_allreduce: fb_comm_nccl_init was not called");
  NC_CHECK(nc.AllReduce(x, x, n, ncclFloat32, ncclSum, c->nc, (cudaStream_t)stream));
  return FB_OK;
}
