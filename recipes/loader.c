/* loader.c — load a Lua recipe in a sandbox, validate every field, copy it into C structs, close Lua.
 *
 * Entry points: fb_recipe_load(), fb_recipe_load_buffer(), fb_recipe_free().
 *
 * The sandbox: only base (load is text-only; dofile, loadfile, require and string.dump are gone),
 * string, table and math; reading an undefined global or assigning one is an error (typos in constructor
 * names fail where they are written); a memory limit (allocator) and an instruction limit (count hook)
 * stop a runaway recipe in well under a second. What a count hook cannot reach is closed off ("Time
 * limits" below): no finalizers, a wall-clock limit, C loops that check the clock, bounded print output.
 * Files (the recipe, its includes) are read only when they are regular files, as text. Every message
 * starts with a file this load ran (push_located). The prelude is C functions: recipe, nvfp4, mxfp8, bf16,
 * s2f6 (constructors), range/first/last/first_fraction/last_fraction (layer ranges), include (a recipe
 * file beside this one), extend (a deep copy with overrides). Every table a constructor or helper
 * returns is remembered with the file:line that made it, so validation errors name a line even for
 * fields of plain tables inside it. Errors read "file:line: field.path: message". */
#include "fb_error.h"
#include "fourbit.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MEM_LIMIT (64u << 20)
#ifndef INSTR_LIMIT
#define INSTR_LIMIT 200000000LL /* about 1-2 s of Lua on one core; the recipe fuzzer lowers fb_recipe_instr_limit */
#endif
long long fb_recipe_instr_limit = INSTR_LIMIT;
#define INCLUDE_DEPTH 8
#define MAX_INCLUDES 256 /* per load: each include parses a file, which the instruction limit does not count */
#define MAX_VARIANTS 65536
/* Time limits. The count hook alone does not stop every recipe:
 *  - Lua turns hooks off while a finalizer (__gc) runs, and lua_close() runs every pending finalizer, so a
 *    `__gc` with an endless loop hung plan/gen/tune/train for ever, in the run or in lua_close. The sandbox's
 *    setmetatable refuses a metatable holding a __gc field: only a metatable that has __gc when setmetatable
 *    is called marks a table for finalization (Lua 5.4 manual, 2.5.3), recipes cannot reach
 *    debug.setmetatable or userdata, and the loader's own metatables have none; so no recipe code ever runs
 *    with hooks off, and lua_close() runs none.
 *  - Hooks do not run inside C functions. The library loops whose length memory does not bound are replaced:
 *    string.rep of an empty string ("" at once), plain string.find (memmem: linear, where Lua's search is
 *    length x length), table.insert/remove/move (loops that check the clock every LOOP_CHECK steps: a __len
 *    or a range can ask for 2^62 steps).
 *  - A wall-clock limit (WALL_LIMIT_S, or FOURBIT_RECIPE_TIMEOUT seconds) is checked by the same hook, by
 *    those loops, and by the allocator for every block of BIG_ALLOC bytes or more, for the instructions that
 *    cost far more than one step (a string.rep of 10 MB per iteration: 200M instructions would take hours,
 *    and 1000 of them, one hook's worth, 2 s). Past the deadline the allocator fails, Lua raises "not
 *    enough memory", and the loader reports the wall-clock limit instead.
 * Once a limit fires, the hook runs at every instruction and raises again, so a pcall cannot swallow it. */
#ifndef WALL_LIMIT_S
#define WALL_LIMIT_S 20 /* of wall time for the whole load: a safety net well above the instruction limit's 1-2 s of
                         * CPU, which a loaded machine (make check on 2 shared cores) may stretch several times */
#endif
#define LOOP_CHECK 256
#define BIG_ALLOC (1u << 20)
/* print goes to stderr and is for debugging a recipe: at most PRINT_LIMIT bytes per load, then one line
 * saying the rest was dropped (an endless print loop wrote 10.7 GB of stderr in 20 s before). */
#define PRINT_LIMIT 4096

typedef struct {
  size_t mem;
  long long instr;
  int depth, includes;
  double deadline; /* CLOCK_MONOTONIC seconds */
  int wall_s;
  int stopped;     /* a limit fired: raise again at every instruction */
  int late;        /* an allocation was refused past the deadline */
  unsigned ticks;
  size_t printed;
  char dir[FB_RECIPE_PATH_MAX];
} sandbox;

static const char LOCKEY = 'L'; /* registry: weak table, table -> "file:line" */
static const char SRCKEY = 'S'; /* registry: the files this load ran, "path" -> true (messages must name one) */
#define MSG_MAX 8192 /* fb_errmsg()'s buffer */

/* ---- sandbox ---------------------------------------------------------------------------------- */
static double now_s(void);
static void *sb_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  sandbox *sb = ud;
  size_t old = ptr ? osize : 0;
  if (nsize == 0) {
    sb->mem -= old;
    free(ptr);
    return NULL;
  }
  if (sb->mem - old + nsize > MEM_LIMIT) return NULL; /* Lua raises "not enough memory" */
  if (nsize >= BIG_ALLOC && sb->deadline > 0 && now_s() > sb->deadline) { /* see "Time limits" */
    sb->late = 1;
    return NULL;
  }
  void *p = realloc(ptr, nsize);
  if (p) sb->mem = sb->mem - old + nsize;
  return p;
}

static sandbox *sb_of(lua_State *L) {
  void *ud;
  lua_getallocf(L, &ud);
  return ud;
}

static double now_s(void) { /* CLOCK_MONOTONIC */
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void sb_hook(lua_State *L, lua_Debug *ar);

/* Raise the limit's error if one is exceeded (from the hook or from a C loop). */
static void sb_check(lua_State *L) {
  sandbox *sb = sb_of(L);
  int instr = sb->instr > fb_recipe_instr_limit, wall = !instr && now_s() > sb->deadline;
  if (!instr && !wall) return;
  if (!sb->stopped) lua_sethook(L, sb_hook, LUA_MASKCOUNT, 1); /* every instruction from now on */
  sb->stopped = 1;
  lua_Debug d;
  if (lua_getstack(L, 0, &d) && lua_getinfo(L, "Sl", &d) && d.currentline > 0)
    lua_pushfstring(L, "%s:%d: ", d.source[0] == '@' ? d.source + 1 : d.short_src, d.currentline);
  else
    lua_pushliteral(L, "");
  if (instr) lua_pushfstring(L, "instruction limit exceeded (%I): a runaway loop?", (lua_Integer)fb_recipe_instr_limit);
  else lua_pushfstring(L, "wall-clock limit exceeded (%d s): a runaway recipe?", sb->wall_s);
  lua_concat(L, 2);
  lua_error(L);
}

static void sb_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  sandbox *sb = sb_of(L);
  if (!sb->stopped) sb->instr += 1000;
  sb_check(L);
}

static void sb_tick(lua_State *L) { /* in C loops */
  sandbox *sb = sb_of(L);
  if (++sb->ticks % LOOP_CHECK == 0) sb_check(L);
}

/* Remember where table at idx was made: the calling Lua line. */
static void tag(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  lua_Debug ar;
  if (!lua_getstack(L, 1, &ar) || !lua_getinfo(L, "Sl", &ar) || ar.currentline <= 0) return;
  const char *src = ar.source[0] == '@' || ar.source[0] == '=' ? ar.source + 1 : ar.short_src;
  lua_rawgetp(L, LUA_REGISTRYINDEX, &LOCKEY);
  lua_pushvalue(L, idx);
  lua_pushfstring(L, "%s:%d", src, ar.currentline);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

static const char *where_of(lua_State *L, int idx, char *buf, size_t n) {
  idx = lua_absindex(L, idx);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &LOCKEY);
  lua_pushvalue(L, idx);
  lua_rawget(L, -2);
  const char *s = lua_tostring(L, -1);
  if (s) snprintf(buf, n, "%s", s);
  lua_pop(L, 2);
  return s ? buf : NULL;
}

/* Where the table at idx was made: its own tag, else the earliest-line tag among its direct children
 * (a plain table such as a layer rule is located by the constructors written inside it). */
static void locate(lua_State *L, int idx, char *buf, size_t n) {
  idx = lua_absindex(L, idx);
  if (where_of(L, idx, buf, n)) return;
  char best[FB_RECIPE_WHERE_MAX] = "", cur[FB_RECIPE_WHERE_MAX];
  long bestline = -1;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    if (lua_istable(L, -1) && where_of(L, -1, cur, sizeof cur)) {
      const char *colon = strrchr(cur, ':');
      long line = colon ? strtol(colon + 1, NULL, 10) : 0;
      if (bestline < 0 || line < bestline) bestline = line, snprintf(best, sizeof best, "%s", cur);
    }
    lua_pop(L, 1);
  }
  if (bestline >= 0) snprintf(buf, n, "%s", best);
}

/* nvfp4 { ... } and friends: the table with its format set. */
static int ctor(lua_State *L, const char *format) {
  if (lua_isnoneornil(L, 1)) lua_newtable(L);
  else luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  lua_getfield(L, 1, "format");
  if (!lua_isnil(L, -1)) {
    const char *f = lua_tostring(L, -1);
    if (!f || strcmp(f, format)) return luaL_error(L, "%s { format = %s }: conflicting format", format, f ? f : "?");
  }
  lua_pop(L, 1);
  lua_pushstring(L, format);
  lua_setfield(L, 1, "format");
  tag(L, 1);
  return 1;
}
static int l_nvfp4(lua_State *L) { return ctor(L, "nvfp4"); }
static int l_mxfp8(lua_State *L) { return ctor(L, "mxfp8"); }
static int l_bf16(lua_State *L) { return ctor(L, "bf16"); }
static int l_s2f6(lua_State *L) { return ctor(L, "s2f6"); }

static int l_recipe(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  tag(L, 1);
  return 1;
}

/* Layer ranges: tables the validator resolves once it knows model.layers. */
static int mkrange(lua_State *L, const char *k1, const char *k2) {
  lua_newtable(L);
  lua_pushvalue(L, 1);
  lua_setfield(L, -2, k1);
  if (k2) {
    lua_pushvalue(L, 2);
    lua_setfield(L, -2, k2);
  }
  tag(L, -1);
  return 1;
}
static int l_range(lua_State *L) { luaL_checkinteger(L, 1); luaL_checkinteger(L, 2); return mkrange(L, "from", "to"); }
static int l_first(lua_State *L) { luaL_checkinteger(L, 1); return mkrange(L, "first", NULL); }
static int l_last(lua_State *L) { luaL_checkinteger(L, 1); return mkrange(L, "last", NULL); }
static int l_first_fraction(lua_State *L) { luaL_checknumber(L, 1); return mkrange(L, "first_fraction", NULL); }
static int l_last_fraction(lua_State *L) { luaL_checknumber(L, 1); return mkrange(L, "last_fraction", NULL); }

/* extend(base, over): a deep copy of base with over's fields on top. Tables whose values carry a
 * `format` (precision specs) and array-like tables are replaced whole; other tables merge. */
#define EXTEND_DEPTH 64

static void deep_copy_d(lua_State *L, int src, int depth) {
  src = lua_absindex(L, src);
  if (depth > EXTEND_DEPTH) luaL_error(L, "extend: tables nested more than %d deep", EXTEND_DEPTH);
  luaL_checkstack(L, 8, "extend: too deep");
  lua_newtable(L);
  lua_pushnil(L);
  while (lua_next(L, src)) {
    lua_pushvalue(L, -2);
    if (lua_type(L, -2) == LUA_TTABLE) deep_copy_d(L, -2, depth + 1);
    else lua_pushvalue(L, -2);
    lua_rawset(L, -5);
    lua_pop(L, 1);
  }
  lua_rawgetp(L, LUA_REGISTRYINDEX, &LOCKEY); /* keep the original's location */
  lua_pushvalue(L, src);
  if (lua_rawget(L, -2) == LUA_TSTRING) {
    lua_pushvalue(L, -3);
    lua_insert(L, -2);
    lua_rawset(L, -3);
  } else {
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

static void deep_copy(lua_State *L, int src) { deep_copy_d(L, src, 0); }

static int replaces_whole(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  if (lua_rawlen(L, idx) > 0) return 1;
  lua_getfield(L, idx, "format");
  int f = !lua_isnil(L, -1);
  lua_pop(L, 1);
  return f;
}

static void merge_into_d(lua_State *L, int dst, int over, int depth) {
  dst = lua_absindex(L, dst);
  over = lua_absindex(L, over);
  if (depth > EXTEND_DEPTH) luaL_error(L, "extend: tables nested more than %d deep", EXTEND_DEPTH);
  luaL_checkstack(L, 8, "extend: too deep");
  lua_pushnil(L);
  while (lua_next(L, over)) {
    lua_pushvalue(L, -2);
    lua_rawget(L, dst); /* existing */
    if (lua_type(L, -1) == LUA_TTABLE && lua_type(L, -2) == LUA_TTABLE && !replaces_whole(L, -2) &&
        !replaces_whole(L, -1)) {
      merge_into_d(L, -1, -2, depth + 1);
      lua_pop(L, 1);
    } else {
      lua_pop(L, 1);
      lua_pushvalue(L, -2);
      if (lua_type(L, -2) == LUA_TTABLE) deep_copy(L, -2);
      else lua_pushvalue(L, -2);
      lua_rawset(L, dst);
    }
    lua_pop(L, 1);
  }
}

static void merge_into(lua_State *L, int dst, int over) { merge_into_d(L, dst, over, 0); }

static int l_extend(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TTABLE);
  deep_copy(L, 1);
  merge_into(L, -1, 2);
  tag(L, -1);
  return 1;
}

static int load_text(lua_State *L, const char *text, size_t len, const char *chunkname) {
  return luaL_loadbufferx(L, text, len, chunkname, "t");
}

/* A recipe or include file, whole; NULL and *why on failure. Only a regular file: a directory read as empty
 * text (and "returned nil"), and opening a FIFO blocked until a writer came. O_NONBLOCK keeps the open
 * itself from blocking; fstat on the open file then decides, with no window between the check and the read. */
static const char WHY_DIR[] = "it is a directory", WHY_NOTREG[] = "not a regular file (a FIFO, device or socket?)";
static char *read_file(const char *path, size_t *len, const char **why) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    *why = strerror(errno);
    return NULL;
  }
  struct stat st;
  *why = NULL;
  if (fstat(fd, &st) != 0) *why = strerror(errno);
  else if (S_ISDIR(st.st_mode)) *why = WHY_DIR;
  else if (!S_ISREG(st.st_mode)) *why = WHY_NOTREG;
  if (*why) {
    close(fd);
    return NULL;
  }
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  *why = "out of memory";
  while (buf) {
    ssize_t got = read(fd, buf + n, cap - n);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) { *why = strerror(errno); free(buf); buf = NULL; break; }
    if (got == 0) break;
    n += (size_t)got;
    if (n < cap) continue;
    if (cap >= (16u << 20)) { *why = "larger than 16 MiB (a recipe is not)"; free(buf); buf = NULL; break; }
    char *nb = realloc(buf, cap *= 2);
    if (!nb) free(buf);
    buf = nb;
  }
  close(fd);
  *len = n;
  return buf;
}

/* Files whose names may start a message: the recipe and what it included. */
static void add_source(lua_State *L, const char *path) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &SRCKEY);
  lua_pushboolean(L, 1);
  lua_setfield(L, -2, path);
  lua_pop(L, 1);
}

/* Does m start with "F:" for a file F this load ran? Then the length of F, else 0. */
static size_t source_prefix(lua_State *L, const char *m) {
  size_t best = 0;
  lua_rawgetp(L, LUA_REGISTRYINDEX, &SRCKEY);
  lua_pushnil(L);
  while (lua_next(L, -2)) {
    lua_pop(L, 1);
    size_t n;
    const char *f = lua_tolstring(L, -1, &n);
    if (n > best && !strncmp(m, f, n) && m[n] == ':') best = n;
  }
  lua_pop(L, 1);
  return best;
}

/* Lua shortens a chunk name past LUA_IDSIZE (60) to "..." and its tail: m = "...TAIL:rest". Push the message
 * with the whole path of the file TAIL ends, if this load ran one; 0 if none. */
static int expand_tail(lua_State *L, const char *m) {
  if (strncmp(m, "...", 3)) return 0;
  for (const char *c = strchr(m + 3, ':'); c; c = strchr(c + 1, ':')) {
    size_t tl = (size_t)(c - (m + 3));
    lua_rawgetp(L, LUA_REGISTRYINDEX, &SRCKEY);
    lua_pushnil(L);
    while (lua_next(L, -2)) {
      lua_pop(L, 1);
      size_t n;
      const char *f = lua_tolstring(L, -1, &n);
      if (n > tl && !strncmp(f + n - tl, m + 3, tl)) {
        lua_pushfstring(L, "%s%s", f, c);
        lua_replace(L, -3);
        lua_pop(L, 1);
        return 1;
      }
    }
    lua_pop(L, 1);
  }
  return 0;
}

/* Push message m so that it starts with a file this load ran: as is, with a shortened path made whole, or
 * after `where` (a forged error("other.lua:1: boom", 0), a message without a position). */
static void push_located(lua_State *L, const char *m, const char *where) {
  if (source_prefix(L, m)) lua_pushstring(L, m);
  else if (!expand_tail(L, m)) lua_pushfstring(L, "%s: %s", where, m);
}

/* include "name.lua": run a recipe file from the same folder; returns what it returns. */
static int l_include(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  sandbox *sb = sb_of(L);
  size_t n = strlen(name);
  if (!n || strchr(name, '/') || strchr(name, '\\') || name[0] == '.' || n < 5 || strcmp(name + n - 4, ".lua"))
    return luaL_error(L, "include '%s': only a .lua file beside the recipe (no folders)", name);
  if (sb->depth >= INCLUDE_DEPTH) return luaL_error(L, "include '%s': more than %d levels deep (a cycle?)", name, INCLUDE_DEPTH);
  if (++sb->includes > MAX_INCLUDES)
    return luaL_error(L, "include '%s': more than %d includes in one recipe (an include inside a loop?)", name, MAX_INCLUDES);
  char path[FB_RECIPE_PATH_MAX];
  if ((size_t)snprintf(path, sizeof path, "%s/%s", sb->dir, name) >= sizeof path)
    return luaL_error(L, "include '%s': the path is longer than %d bytes", name, FB_RECIPE_PATH_MAX - 1);
  size_t len;
  const char *why = "";
  char *text = read_file(path, &len, &why);
  if (!text) return luaL_error(L, "include '%s': cannot read %s: %s", name, path, why);
  add_source(L, path);
  lua_pushfstring(L, "@%s", path);
  int rc = load_text(L, text, len, lua_tostring(L, -1));
  free(text);
  if (rc != LUA_OK) { /* a syntax error names the include's line; a binary chunk or a C stack overflow nothing */
    const char *m = lua_tostring(L, -1) ? lua_tostring(L, -1) : "error";
    if (source_prefix(L, m) || expand_tail(L, m)) return lua_error(L);
    return luaL_error(L, "include '%s': %s: %s", name, path, m);
  }
  sb->depth++;
  lua_call(L, 0, 1);
  sb->depth--;
  if (!lua_istable(L, -1)) return luaL_error(L, "include '%s': it returned %s, not a recipe table", name, luaL_typename(L, -1));
  return 1;
}

static int l_load(lua_State *L) { /* load(chunk [, name [, mode [, env]]]), text only */
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  const char *name = luaL_optstring(L, 2, "=(load)");
  if (load_text(L, s, len, name) != LUA_OK) {
    luaL_pushfail(L);
    lua_insert(L, -2);
    return 2;
  }
  if (!lua_isnone(L, 4)) {
    lua_pushvalue(L, 4);
    if (!lua_setupvalue(L, -2, 1)) lua_pop(L, 1);
  }
  return 1;
}

/* string.find(s, sub [, init]): plain search only, by memmem (linear; Lua's plain search compares the
 * pattern at every position, 10^14 steps for a 20 MB string and a 10 MB pattern, inside C). */
static int l_find_plain(lua_State *L) {
  size_t ls, lp;
  const char *s = luaL_checklstring(L, 1, &ls), *p = luaL_checklstring(L, 2, &lp);
  lua_Integer init = luaL_optinteger(L, 3, 1);
  if (init == 0 || (init < 0 && (lua_Unsigned)-init > ls)) init = 1;
  else if (init < 0) init = (lua_Integer)ls + init + 1;
  if ((lua_Unsigned)init - 1 > ls) {
    luaL_pushfail(L);
    return 1;
  }
  const char *hit = memmem(s + init - 1, ls - (size_t)(init - 1), p, lp);
  if (!hit) {
    luaL_pushfail(L);
    return 1;
  }
  lua_pushinteger(L, (lua_Integer)(hit - s) + 1);
  lua_pushinteger(L, (lua_Integer)(hit - s) + (lua_Integer)lp);
  return 2;
}

/* string.rep(s, n [, sep]): Lua loops n times even when s and sep are empty (n = 2^62: for ever, in C).
 * Otherwise the result is n bytes or more, which the memory limit bounds. */
static int l_rep(lua_State *L) {
  size_t l, lsep;
  luaL_checklstring(L, 1, &l);
  lua_Integer n = luaL_checkinteger(L, 2);
  luaL_optlstring(L, 3, "", &lsep);
  if (n <= 0 || l + lsep == 0) {
    lua_pushliteral(L, "");
    return 1;
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

/* table.insert, table.remove, table.move with the semantics of Lua 5.4's (tables only, no proxies), and a
 * clock check every LOOP_CHECK steps: a __len or a range may ask for 2^62 steps, which no hook sees. */
static int l_tinsert(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Integer e = (lua_Integer)((lua_Unsigned)luaL_len(L, 1) + 1u), pos; /* first empty slot */
  switch (lua_gettop(L)) {
  case 2: pos = e; break;
  case 3:
    pos = luaL_checkinteger(L, 2);
    luaL_argcheck(L, (lua_Unsigned)pos - 1u < (lua_Unsigned)e, 2, "position out of bounds");
    for (lua_Integer i = e; i > pos; --i) {
      lua_geti(L, 1, i - 1);
      lua_seti(L, 1, i);
      sb_tick(L);
    }
    break;
  default: return luaL_error(L, "wrong number of arguments to 'insert'");
  }
  lua_seti(L, 1, pos);
  return 0;
}

static int l_tremove(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Integer size = luaL_len(L, 1), pos = luaL_optinteger(L, 2, size);
  if (pos != size) luaL_argcheck(L, (lua_Unsigned)pos - 1u <= (lua_Unsigned)size, 2, "position out of bounds");
  lua_geti(L, 1, pos);
  for (; pos < size; ++pos) {
    lua_geti(L, 1, pos + 1);
    lua_seti(L, 1, pos);
    sb_tick(L);
  }
  lua_pushnil(L);
  lua_seti(L, 1, pos);
  return 1;
}

static int l_tmove(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Integer f = luaL_checkinteger(L, 2), e = luaL_checkinteger(L, 3), t = luaL_checkinteger(L, 4);
  int tt = !lua_isnoneornil(L, 5) ? 5 : 1;
  luaL_checktype(L, tt, LUA_TTABLE);
  if (e >= f) {
    luaL_argcheck(L, f > 0 || e < LUA_MAXINTEGER + f, 3, "too many elements to move");
    lua_Integer n = e - f + 1;
    luaL_argcheck(L, t <= LUA_MAXINTEGER - n + 1, 4, "destination wrap around");
    if (t > e || t <= f || (tt != 1 && !lua_compare(L, 1, tt, LUA_OPEQ))) {
      for (lua_Integer i = 0; i < n; ++i) {
        lua_geti(L, 1, f + i);
        lua_seti(L, tt, t + i);
        sb_tick(L);
      }
    } else {
      for (lua_Integer i = n - 1; i >= 0; --i) {
        lua_geti(L, 1, f + i);
        lua_seti(L, tt, t + i);
        sb_tick(L);
      }
    }
  }
  lua_pushvalue(L, tt);
  return 1;
}

/* setmetatable(t, mt) without finalizers: see "Time limits" at the top. */
static int l_setmetatable(lua_State *L) {
  if (lua_type(L, 2) == LUA_TTABLE) {
    lua_pushliteral(L, "__gc");
    if (lua_rawget(L, 2) != LUA_TNIL)
      return luaL_error(L, "setmetatable: a metatable with '__gc' is refused (a finalizer runs with the sandbox's "
                           "limits off)");
    lua_pop(L, 1);
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

static void out_bytes(sandbox *sb, const char *s, size_t n) {
  if (sb->printed >= PRINT_LIMIT) return;
  size_t room = PRINT_LIMIT - sb->printed;
  fwrite(s, 1, n < room ? n : room, stderr);
  sb->printed += n < room ? n : room;
  if (sb->printed >= PRINT_LIMIT) fprintf(stderr, "\n(recipe output truncated: print writes at most %d bytes)\n", PRINT_LIMIT);
}

static int l_print(lua_State *L) { /* to stderr: stdout belongs to the command (--json); bounded */
  sandbox *sb = sb_of(L);
  int n = lua_gettop(L);
  for (int i = 1; i <= n && sb->printed < PRINT_LIMIT; ++i) {
    size_t len;
    const char *s = luaL_tolstring(L, i, &len);
    if (i > 1) out_bytes(sb, "\t", 1);
    out_bytes(sb, s, len);
    lua_pop(L, 1);
  }
  out_bytes(sb, "\n", 1);
  return 0;
}

static int l_global_get(lua_State *L) {
  return luaL_error(L, "undefined global '%s'", lua_tostring(L, 2) ? lua_tostring(L, 2) : "?");
}
static int l_global_set(lua_State *L) {
  return luaL_error(L, "assignment to global '%s': recipes use locals (local %s = ...)",
                    lua_tostring(L, 2) ? lua_tostring(L, 2) : "?", lua_tostring(L, 2) ? lua_tostring(L, 2) : "x");
}

static int open_sandbox(lua_State *L) {
  static const luaL_Reg libs[] = {{LUA_GNAME, luaopen_base}, {LUA_STRLIBNAME, luaopen_string},
                                  {LUA_TABLIBNAME, luaopen_table}, {LUA_MATHLIBNAME, luaopen_math}};
  for (size_t i = 0; i < sizeof libs / sizeof libs[0]; ++i) {
    luaL_requiref(L, libs[i].name, libs[i].func, 1);
    lua_pop(L, 1);
  }
  lua_newtable(L); /* weak-keyed location table */
  lua_newtable(L);
  lua_pushstring(L, "k");
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &LOCKEY);
  lua_newtable(L);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &SRCKEY);

  lua_pushglobaltable(L);
  static const char *drop[] = {"dofile", "loadfile", "require", "collectgarbage"};
  for (size_t i = 0; i < sizeof drop / sizeof drop[0]; ++i) {
    lua_pushnil(L);
    lua_setfield(L, -2, drop[i]);
  }
  lua_getfield(L, -1, "string");
  static const char *nostr[] = {"dump", "match", "gmatch", "gsub"}; /* patterns backtrack in C, past the hook */
  for (size_t i = 0; i < sizeof nostr / sizeof nostr[0]; ++i) {
    lua_pushnil(L);
    lua_setfield(L, -2, nostr[i]);
  }
  lua_pushcfunction(L, l_find_plain);
  lua_setfield(L, -2, "find");
  lua_getfield(L, -1, "rep");
  lua_pushcclosure(L, l_rep, 1);
  lua_setfield(L, -2, "rep");
  lua_pop(L, 1);
  lua_getfield(L, -1, "table");
  static const luaL_Reg tfns[] = {{"insert", l_tinsert}, {"remove", l_tremove}, {"move", l_tmove}, {NULL, NULL}};
  luaL_setfuncs(L, tfns, 0);
  lua_pop(L, 1);
  lua_getfield(L, -1, "setmetatable");
  lua_pushcclosure(L, l_setmetatable, 1);
  lua_setfield(L, -2, "setmetatable");
  static const luaL_Reg fns[] = {{"load", l_load}, {"print", l_print}, {"recipe", l_recipe}, {"nvfp4", l_nvfp4},
                                 {"mxfp8", l_mxfp8}, {"bf16", l_bf16}, {"s2f6", l_s2f6}, {"range", l_range},
                                 {"first", l_first}, {"last", l_last}, {"first_fraction", l_first_fraction},
                                 {"last_fraction", l_last_fraction}, {"include", l_include},
                                 {"extend", l_extend}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
  lua_newtable(L);
  lua_pushcfunction(L, l_global_get);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, l_global_set);
  lua_setfield(L, -2, "__newindex");
  lua_setmetatable(L, -2);
  lua_pop(L, 1);
  return 0;
}

/* ---- validation ------------------------------------------------------------------------------- */
typedef struct {
  lua_State *L;
  char path[256];
  char where[FB_RECIPE_WHERE_MAX];
} vctx;

#define VERR(v, ...) verr((v), __VA_ARGS__)
static fb_status verr(vctx *v, const char *fmt, ...) FB_PRINTF(2, 3);
/* Control characters a recipe's strings may carry are shown escaped: one message, one line. */
static void escape(const char *in, char *out, size_t n) {
  size_t o = 0;
  for (; *in && o + 5 < n; ++in) {
    unsigned char c = (unsigned char)*in;
    if (c == '\n') out[o++] = '\\', out[o++] = 'n';
    else if (c < 0x20 || c == 0x7F) o += (size_t)snprintf(out + o, n - o, "\\x%02x", c);
    else out[o++] = (char)c;
  }
  out[o] = 0;
}

static fb_status verr(vctx *v, const char *fmt, ...) {
  char msg[MSG_MAX], path[400], esc[MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  /* "key: what" or "[3]: what" from a field reader: the key belongs to the path */
  const char *m = msg, *e = msg;
  snprintf(path, sizeof path, "%s", v->path);
  if (*e == '[') {
    while (*e && *e != ']') ++e;
    if (*e == ']') ++e;
  } else {
    while (*e == '_' || (*e >= 'a' && *e <= 'z') || (*e >= 'A' && *e <= 'Z') || (*e >= '0' && *e <= '9')) ++e;
  }
  if (e > msg && e[0] == ':' && e[1] == ' ') {
    size_t pl = strlen(path);
    snprintf(path + pl, sizeof path - pl, "%s%.*s", pl && msg[0] != '[' ? "." : "", (int)(e - msg), msg);
    m = e + 2;
  }
  escape(m, esc, sizeof esc);
  return FB_USERERR(FB_EINVAL, "%s: %s%s%s", v->where, path, path[0] ? ": " : "", esc);
}

/* Enter field `key` (or index) of the table at the top: path grows, location follows tagged tables. */
typedef struct {
  size_t plen;
  char where[FB_RECIPE_WHERE_MAX];
} vmark;

static vmark enter(vctx *v, const char *fmt, ...) FB_PRINTF(2, 3);
static vmark enter(vctx *v, const char *fmt, ...) {
  vmark m;
  m.plen = strlen(v->path);
  memcpy(m.where, v->where, sizeof m.where);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(v->path + m.plen, sizeof v->path - m.plen, fmt, ap);
  va_end(ap);
  if (v->path[0] == '.') memmove(v->path, v->path + 1, strlen(v->path));
  if (lua_type(v->L, -1) == LUA_TTABLE) locate(v->L, -1, v->where, sizeof v->where);
  return m;
}
static void leave(vctx *v, vmark m) {
  v->path[m.plen] = 0;
  memcpy(v->where, m.where, sizeof v->where);
}

static size_t edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b), d[32][32];
  if (la > 30 || lb > 30) return 99;
  for (size_t i = 0; i <= la; ++i) d[i][0] = i;
  for (size_t j = 0; j <= lb; ++j) d[0][j] = j;
  for (size_t i = 1; i <= la; ++i)
    for (size_t j = 1; j <= lb; ++j) {
      size_t c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]), x = d[i - 1][j] + 1, y = d[i][j - 1] + 1;
      d[i][j] = c < x ? (c < y ? c : y) : (x < y ? x : y);
    }
  return d[la][lb];
}

/* Every key of the table at the top must be a string in `allowed` (NULL-terminated). */
static fb_status check_keys(vctx *v, const char *const *allowed) {
  lua_State *L = v->L;
  lua_pushnil(L);
  while (lua_next(L, -2)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TSTRING) {
      const char *shown = lua_type(L, -1) == LUA_TNUMBER ? lua_tostring(L, -1) : luaL_typename(L, -1);
      fb_status s = VERR(v, "unexpected entry [%s]: this table takes named keys only", shown);
      lua_pop(L, 1);
      return s;
    }
    const char *k = lua_tostring(L, -1);
    int ok = 0;
    const char *best = NULL;
    size_t bd = 3;
    for (const char *const *a = allowed; *a; ++a) {
      if (!strcmp(*a, k)) ok = 1;
      size_t d = edit_distance(*a, k);
      if (d < bd) bd = d, best = *a;
    }
    if (!ok) {
      char hint[64] = "";
      if (best) snprintf(hint, sizeof hint, " (did you mean '%s'?)", best);
      fb_status s = VERR(v, "unknown key '%s'%s", k, hint);
      lua_pop(L, 1);
      return s;
    }
  }
  return FB_OK;
}

/* Field readers: the table is at the top. present: -1 absent (default used), else 1. */
static fb_status get_table(vctx *v, const char *key, int required, int *present) {
  lua_getfield(v->L, -1, key);
  *present = !lua_isnil(v->L, -1);
  if (!*present) {
    lua_pop(v->L, 1);
    return required ? VERR(v, "missing required key '%s'", key) : FB_OK;
  }
  if (!lua_istable(v->L, -1)) {
    fb_status s = VERR(v, "%s: expected a table, got %s", key, luaL_typename(v->L, -1));
    lua_pop(v->L, 1);
    return s;
  }
  return FB_OK; /* left on the stack */
}

static fb_status num_value(vctx *v, const char *key, int integer, double lo, double hi, double *out) {
  lua_State *L = v->L;
  if (lua_type(L, -1) != LUA_TNUMBER) return VERR(v, "%s: expected a number, got %s", key, luaL_typename(L, -1));
  double x = lua_tonumber(L, -1);
  if (!isfinite(x)) return VERR(v, "%s: %g is not finite", key, x);
  if (integer && x != floor(x)) return VERR(v, "%s: %g is not an integer", key, x);
  if (x < lo || x > hi) return VERR(v, "%s: %.17g is out of range [%.17g, %.17g]", key, x, lo, hi);
  *out = x;
  return FB_OK;
}

static fb_status get_int(vctx *v, const char *key, int required, long long lo, long long hi, long long dflt,
                         long long *out) {
  lua_getfield(v->L, -1, key);
  if (lua_isnil(v->L, -1)) {
    lua_pop(v->L, 1);
    if (required) return VERR(v, "missing required key '%s'", key);
    *out = dflt;
    return FB_OK;
  }
  double x;
  fb_status s = num_value(v, key, 1, (double)lo, (double)hi, &x);
  lua_pop(v->L, 1);
  *out = (long long)x;
  return s;
}

static fb_status get_bool(vctx *v, const char *key, int dflt, int *out) {
  lua_getfield(v->L, -1, key);
  int t = lua_type(v->L, -1);
  fb_status s = FB_OK;
  if (t == LUA_TNIL) *out = dflt;
  else if (t == LUA_TBOOLEAN) *out = lua_toboolean(v->L, -1);
  else s = VERR(v, "%s: expected true or false, got %s", key, luaL_typename(v->L, -1));
  lua_pop(v->L, 1);
  return s;
}

/* A string among `names`; index into it. */
static fb_status get_enum(vctx *v, const char *key, const char *const *names, int required, int dflt, int *out) {
  lua_getfield(v->L, -1, key);
  fb_status s = FB_OK;
  if (lua_isnil(v->L, -1)) {
    if (required) s = VERR(v, "missing required key '%s'", key);
    *out = dflt;
  } else if (lua_type(v->L, -1) != LUA_TSTRING) {
    s = VERR(v, "%s: expected a string, got %s", key, luaL_typename(v->L, -1));
  } else {
    size_t xl;
    const char *x = lua_tolstring(v->L, -1, &xl);
    *out = -1;
    if (strlen(x) != xl) {
      lua_pop(v->L, 1);
      return VERR(v, "%s: the string holds a NUL byte", key);
    }
    char list[256] = "";
    for (int i = 0; names[i]; ++i) {
      if (!strcmp(names[i], x)) *out = i;
      snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", names[i]);
    }
    if (*out < 0) s = VERR(v, "%s: '%s' is not one of %s", key, x, list);
  }
  lua_pop(v->L, 1);
  return s;
}

static const char *const FORMAT_NAMES[] = {"bf16", "nvfp4", "mxfp8", "s2f6", NULL};
static const char *const GRAN_NAMES[] = {"tensor", "token", "expert", NULL};
static const char *const ROUND_NAMES[] = {"rn", "sr", NULL};
static const char *const ELEM_NAMES[] = {"e4m3", "e5m2", NULL};

const char *fb_format_name(fb_format f) { return (unsigned)f < 4 ? FORMAT_NAMES[f] : "?"; }
const char *fb_gran_name(fb_gran g) { return (unsigned)g < 3 ? GRAN_NAMES[g] : "?"; }

/* The format of the spec at the top: a table with `format` (constructors set it) or a bare string. */
static fb_status spec_format(vctx *v, const char *const *allowed_for_op, int *fmt) {
  lua_State *L = v->L;
  const char *f = NULL;
  lua_CFunction cf = lua_tocfunction(L, -1);
  if (lua_type(L, -1) == LUA_TSTRING) f = lua_tostring(L, -1);
  else if (cf == l_bf16 || cf == l_nvfp4 || cf == l_mxfp8 || cf == l_s2f6) /* bf16 written without braces */
    f = cf == l_bf16 ? "bf16" : cf == l_nvfp4 ? "nvfp4" : cf == l_mxfp8 ? "mxfp8" : "s2f6";
  else if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "format");
    f = lua_tostring(L, -1);
    lua_pop(L, 1);
    if (!f) return VERR(v, "missing 'format' (write nvfp4 { ... }, mxfp8 { ... }, \"bf16\" or s2f6 { ... })");
  } else {
    return VERR(v, "expected a precision (nvfp4 { ... }, \"bf16\", ...), got %s", luaL_typename(L, -1));
  }
  *fmt = -1;
  for (int i = 0; FORMAT_NAMES[i]; ++i)
    if (!strcmp(FORMAT_NAMES[i], f)) *fmt = i;
  if (*fmt < 0) return VERR(v, "unknown format '%s'", f);
  char list[128] = "";
  int ok = 0;
  for (int i = 0; allowed_for_op[i]; ++i) {
    if (!strcmp(allowed_for_op[i], f)) ok = 1;
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", allowed_for_op[i]);
  }
  if (!ok) return VERR(v, "format '%s' is not allowed here (%s)", f, list);
  return FB_OK;
}

/* An operand's quantization options (table at the top) for format fmt. role: "act", "weight",
 * "grad", "saved", "combine". */
static fb_status read_qspec(vctx *v, fb_format fmt, const char *role, int with_format, fb_qspec *q) {
  memset(q, 0, sizeof *q);
  q->format = fmt;
  /* with_format: the options sit in the constructor's own table, beside its `format` */
  static const char *const kbf[][2] = {{NULL, NULL}, {"format", NULL}};
  static const char *const knv[][7] = {{"outer", "four_over_six", "two_d", "rounding", "rht", NULL, NULL},
                                       {"outer", "four_over_six", "two_d", "rounding", "rht", "format", NULL}};
  static const char *const kmx[][5] = {{"rounding", "element", "rht", NULL, NULL},
                                       {"rounding", "element", "rht", "format", NULL}};
  static const char *const ks2[][3] = {{"rht", NULL, NULL}, {"rht", "format", NULL}};
  int w = with_format ? 1 : 0;
  if (fmt == FB_FMT_BF16) return check_keys(v, kbf[w]);
  FB_TRY(check_keys(v, fmt == FB_FMT_NVFP4 ? knv[w] : fmt == FB_FMT_MXFP8 ? kmx[w] : ks2[w]));
  int r = 0, b = 0;
  long long rht = 0;
  if (fmt != FB_FMT_S2F6) {
    FB_TRY(get_enum(v, "rounding", ROUND_NAMES, 0, 0, &r));
    q->rounding = (fb_rounding)r;
  }
  FB_TRY(get_int(v, "rht", 0, 0, 32, 0, &rht));
  if (rht != 0 && rht != 16 && rht != 32) return VERR(v, "rht: %lld is not 0, 16 or 32", rht);
  if (rht && !strcmp(role, "grad")) return VERR(v, "rht: the backward's transform is bwd.wgrad_rht (it applies to both wgrad operands)");
  if (rht && strcmp(role, "combine")) return VERR(v, "rht: a Hadamard transform applies to the combine payload (and bwd.wgrad_rht) only");
  if (fmt == FB_FMT_S2F6 && rht == 16) return VERR(v, "rht: the S2F6 combine uses RHT-32 (or none)");
  q->rht = (int)rht;
  if (fmt == FB_FMT_MXFP8) {
    FB_TRY(get_enum(v, "element", ELEM_NAMES, 0, 0, &b));
    q->e5m2 = b;
  }
  if (fmt == FB_FMT_NVFP4) {
    int g;
    int dflt = !strcmp(role, "weight") ? FB_GRAN_EXPERT : !strcmp(role, "act") ? FB_GRAN_TOKEN : FB_GRAN_TENSOR;
    FB_TRY(get_enum(v, "outer", GRAN_NAMES, 0, dflt, &g));
    q->outer = (fb_gran)g;
    if (!strcmp(role, "weight") && g == FB_GRAN_TOKEN) return VERR(v, "outer: weights take 'tensor' or 'expert' scales, not 'token'");
    if (strcmp(role, "weight") && g == FB_GRAN_EXPERT) return VERR(v, "outer: 'expert' scales are for weights; activations and gradients take 'tensor' or 'token'");
    FB_TRY(get_bool(v, "four_over_six", 0, &q->four_over_six));
    FB_TRY(get_bool(v, "two_d", 0, &q->two_d));
    if (q->two_d && g == FB_GRAN_TOKEN) return VERR(v, "two_d: 16x16 blocks need 'tensor' or 'expert' outer scales");
    if (q->two_d && q->four_over_six) return VERR(v, "two_d and four_over_six do not combine (docs/numerics.md)");
  }
  return FB_OK;
}

/* A sub-table `key` of the spec at the top (absent: empty options). */
static fb_status read_sub_qspec(vctx *v, const char *key, fb_format fmt, const char *role, fb_qspec *q) {
  lua_State *L = v->L;
  lua_getfield(L, -1, key);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_newtable(L);
  } else if (!lua_istable(L, -1)) {
    fb_status s = VERR(v, "%s: expected a table of options, got %s", key, luaL_typename(L, -1));
    lua_pop(L, 1);
    return s;
  }
  vmark m = enter(v, ".%s", key);
  fb_status s = read_qspec(v, fmt, role, 0, q);
  leave(v, m);
  lua_pop(L, 1);
  return s;
}

static fb_status read_fwd(vctx *v, fb_layer_prec *p) {
  static const char *const ok[] = {"nvfp4", "mxfp8", "bf16", NULL};
  int f;
  FB_TRY(spec_format(v, ok, &f));
  if (lua_istable(v->L, -1)) {
    static const char *const keys[] = {"format", "act", "weight", NULL};
    FB_TRY(check_keys(v, keys));
    FB_TRY(read_sub_qspec(v, "act", (fb_format)f, "act", &p->fwd_act));
    FB_TRY(read_sub_qspec(v, "weight", (fb_format)f, "weight", &p->fwd_weight));
  } else {
    memset(&p->fwd_act, 0, sizeof p->fwd_act);
    p->fwd_act.format = (fb_format)f;
    if (f == FB_FMT_NVFP4) p->fwd_act.outer = FB_GRAN_TOKEN;
    p->fwd_weight = p->fwd_act;
    if (f == FB_FMT_NVFP4) p->fwd_weight.outer = FB_GRAN_EXPERT;
  }
  return FB_OK;
}

static fb_status read_bwd(vctx *v, fb_layer_prec *p) {
  static const char *const ok[] = {"mxfp8", "nvfp4", "bf16", NULL};
  int f;
  FB_TRY(spec_format(v, ok, &f));
  memset(&p->bwd_grad, 0, sizeof p->bwd_grad);
  p->bwd_grad.format = (fb_format)f;
  p->bwd_saved = p->bwd_grad;
  p->wgrad_rht = 0;
  if (!lua_istable(v->L, -1)) return FB_OK;
  static const char *const keys[] = {"format", "grad", "saved", "wgrad_rht", NULL};
  FB_TRY(check_keys(v, keys));
  FB_TRY(read_sub_qspec(v, "grad", (fb_format)f, "grad", &p->bwd_grad));
  FB_TRY(read_sub_qspec(v, "saved", (fb_format)f, "saved", &p->bwd_saved));
  long long rht;
  FB_TRY(get_int(v, "wgrad_rht", 0, 0, 32, 0, &rht));
  if (rht != 0 && rht != 16 && rht != 32) return VERR(v, "wgrad_rht: %lld is not 0, 16 or 32", rht);
  if (rht && f == FB_FMT_BF16) return VERR(v, "wgrad_rht: a bf16 backward is not quantized");
  p->wgrad_rht = (int)rht;
  return FB_OK;
}

static fb_status read_dispatch(vctx *v, fb_layer_prec *p) {
  lua_State *L = v->L;
  if (lua_type(L, -1) == LUA_TSTRING && !strcmp(lua_tostring(L, -1), "fwd")) {
    p->dispatch_fwd = 1;
    return FB_OK;
  }
  static const char *const ok[] = {"nvfp4", "mxfp8", "bf16", NULL};
  int f;
  FB_TRY(spec_format(v, ok, &f));
  if (lua_istable(L, -1)) {
    static const char *const keys[] = {"format", NULL};
    fb_status s = check_keys(v, keys);
    if (s != FB_OK) {
      char prev[1024];
      snprintf(prev, sizeof prev, "%s", fb_errmsg());
      return FB_USERERR(FB_EINVAL, "%s (the dispatch payload is quantized as fwd.act says; give only its format)", prev);
    }
  }
  p->dispatch = (fb_format)f;
  p->dispatch_fwd = 0;
  return FB_OK;
}

static fb_status read_combine(vctx *v, fb_layer_prec *p) {
  static const char *const ok[] = {"s2f6", "mxfp8", "bf16", NULL};
  int f;
  FB_TRY(spec_format(v, ok, &f));
  memset(&p->combine, 0, sizeof p->combine);
  p->combine.format = (fb_format)f;
  if (!lua_istable(v->L, -1)) return FB_OK;
  fb_status s = read_qspec(v, (fb_format)f, "combine", 1, &p->combine);
  if (s == FB_OK && p->combine.rounding == FB_ROUND_SR) s = VERR(v, "rounding: the combine payload rounds to nearest");
  return s;
}

/* Read op `key` (fwd, bwd, dispatch, combine) of the table at the top if present. */
static fb_status read_op(vctx *v, const char *key, int required, fb_layer_prec *p, int *present) {
  lua_State *L = v->L;
  lua_getfield(L, -1, key);
  *present = !lua_isnil(L, -1);
  if (!*present) {
    lua_pop(L, 1);
    return required ? VERR(v, "missing required key '%s'", key) : FB_OK;
  }
  vmark m = enter(v, ".%s", key);
  fb_status s;
  if (!strcmp(key, "fwd")) s = read_fwd(v, p);
  else if (!strcmp(key, "bwd")) s = read_bwd(v, p);
  else if (!strcmp(key, "dispatch")) s = read_dispatch(v, p);
  else s = read_combine(v, p);
  leave(v, m);
  lua_pop(L, 1);
  return s;
}

static fb_status read_model(vctx *v, fb_recipe *r) {
  static const char *const keys[] = {"layers", "d_model", "d_ff", "experts", "top_k", "vocab", "conv_width", NULL};
  FB_TRY(check_keys(v, keys));
  long long x;
  fb_model *m = &r->model;
  FB_TRY(get_int(v, "layers", 1, 1, 1024, 0, &x)); m->layers = (int)x;
  FB_TRY(get_int(v, "d_model", 1, 32, 65536, 0, &x)); m->d_model = (int)x;
  FB_TRY(get_int(v, "d_ff", 1, 32, 65536, 0, &x)); m->d_ff = (int)x;
  FB_TRY(get_int(v, "experts", 1, 1, 4096, 0, &x)); m->experts = (int)x;
  FB_TRY(get_int(v, "top_k", 1, 1, 64, 0, &x)); m->top_k = (int)x;
  FB_TRY(get_int(v, "vocab", 1, 2, 1 << 24, 0, &x)); m->vocab = (int)x;
  FB_TRY(get_int(v, "conv_width", 0, 1, 16, 4, &x)); m->conv_width = (int)x;
  if (m->top_k > m->experts) return VERR(v, "top_k: %d is more than experts (%d)", m->top_k, m->experts);
  /* every block of the recipe must tile the widths: 16 (NVFP4), 32 (MXFP8, RHT-32, S2F6) */
  if (m->d_model % 32) return VERR(v, "d_model: %d is not a multiple of 32 (the MXFP8, RHT and S2F6 block)", m->d_model);
  if (m->d_ff % 32) return VERR(v, "d_ff: %d is not a multiple of 32 (the MXFP8 block)", m->d_ff);
  return FB_OK;
}

/* A layer range (table at the top) -> [first, last]. */
static fb_status read_range(vctx *v, int L_, int *first, int *last) {
  lua_State *L = v->L;
  if (!lua_istable(L, -1)) return VERR(v, "expected a range (range(a, b), first(n), last(n), last_fraction(f), {a, b}), got %s", luaL_typename(L, -1));
  double a, b;
  size_t rl = lua_rawlen(L, -1);
  if (rl != 0 && rl != 2) return VERR(v, "a list of %zu numbers; a range is {a, b}, range(a, b), first(n), last(n) or last_fraction(f)", rl);
  if (rl == 2) {
    lua_pushnil(L);
    while (lua_next(L, -2)) {
      lua_pop(L, 1);
      if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1 || lua_tointeger(L, -1) > 2) {
        lua_pop(L, 1);
        return VERR(v, "{a, b} takes two numbers and nothing else");
      }
    }
    lua_rawgeti(L, -1, 1);
    fb_status s = num_value(v, "[1]", 1, 1, 1e9, &a);
    lua_pop(L, 1);
    FB_TRY(s);
    lua_rawgeti(L, -1, 2);
    s = num_value(v, "[2]", 1, 1, 1e9, &b);
    lua_pop(L, 1);
    FB_TRY(s);
  } else {
    static const char *const keys[] = {"from", "to", "first", "last", "first_fraction", "last_fraction", NULL};
    FB_TRY(check_keys(v, keys));
    lua_getfield(L, -1, "from");
    int has_from = !lua_isnil(L, -1);
    lua_pop(L, 1);
    if (has_from) {
      long long f, t;
      FB_TRY(get_int(v, "from", 1, 1, 1000000000, 0, &f));
      FB_TRY(get_int(v, "to", 1, 1, 1000000000, 0, &t));
      a = (double)f, b = (double)t;
    } else {
      const char *which[] = {"first", "last", "first_fraction", "last_fraction"};
      int found = -1;
      double x = 0;
      for (int i = 0; i < 4; ++i) {
        lua_getfield(L, -1, which[i]);
        if (!lua_isnil(L, -1)) {
          if (found >= 0) { lua_pop(L, 1); return VERR(v, "a range takes one of first, last, first_fraction, last_fraction"); }
          found = i;
          fb_status s = num_value(v, which[i], i < 2, i < 2 ? 1 : 0, i < 2 ? 1e9 : 1, &x);
          if (s != FB_OK) { lua_pop(L, 1); return s; }
        }
        lua_pop(L, 1);
      }
      if (found < 0) return VERR(v, "empty range");
      double n = found < 2 ? x : floor(x * L_ + 0.5); /* fractions round to the nearest layer count */
      if (n < 1) return VERR(v, "%s(%g) of %d layers selects no layer", which[found], x, L_);
      if (found == 0 || found == 2) a = 1, b = n;
      else a = L_ - n + 1, b = L_;
    }
  }
  if (a > b) return VERR(v, "range %g..%g is empty (first > last)", a, b);
  if (a < 1 || b > L_) return VERR(v, "range %g..%g is outside the model's layers 1..%d", a, b, L_);
  *first = (int)a, *last = (int)b;
  return FB_OK;
}

static fb_status read_rules(vctx *v, fb_recipe *r) {
  lua_State *L = v->L;
  size_t n = lua_rawlen(L, -1);
  /* a rule list is an array: no named keys */
  lua_pushnil(L);
  while (lua_next(L, -2)) {
    lua_pop(L, 1);
    if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1 || (size_t)lua_tointeger(L, -1) > n) {
      fb_status s = VERR(v, "a list of rules { range = ..., fwd = ... }; unexpected key '%s'", lua_tostring(L, -1) ? lua_tostring(L, -1) : luaL_typename(L, -1));
      lua_pop(L, 1);
      return s;
    }
  }
  r->rules = calloc(n ? n : 1, sizeof *r->rules);
  if (!r->rules) return FB_ERR(FB_ENOMEM, "rules");
  for (size_t i = 1; i <= n; ++i) {
    lua_rawgeti(L, -1, (lua_Integer)i);
    vmark m = enter(v, "[%zu]", i);
    fb_status s = FB_OK;
    fb_layer_rule *rule = &r->rules[r->nrules];
    if (!lua_istable(L, -1)) s = VERR(v, "expected a rule table, got %s", luaL_typename(L, -1));
    static const char *const keys[] = {"range", "fwd", "bwd", "dispatch", "combine", "note", NULL};
    if (s == FB_OK) s = check_keys(v, keys);
    if (s == FB_OK) {
      lua_getfield(L, -1, "range");
      if (lua_isnil(L, -1)) s = VERR(v, "missing required key 'range'");
      else {
        vmark m2 = enter(v, ".range");
        s = read_range(v, r->model.layers, &rule->first, &rule->last);
        for (int j = 0; j < r->nrules && s == FB_OK; ++j)
          if (rule->first <= r->rules[j].last && r->rules[j].first <= rule->last)
            s = VERR(v, "layers %d..%d overlap layers[%d] (%d..%d, %s)", rule->first, rule->last, j + 1,
                     r->rules[j].first, r->rules[j].last, r->rules[j].where);
        leave(v, m2);
      }
      lua_pop(L, 1);
    }
    snprintf(rule->where, sizeof rule->where, "%s", v->where);
    rule->prec = r->base;
    const char *ops[] = {"fwd", "bwd", "dispatch", "combine"};
    for (int k = 0; k < 4 && s == FB_OK; ++k) {
      int present;
      s = read_op(v, ops[k], 0, &rule->prec, &present);
      if (present) rule->set |= 1u << k;
    }
    if (s == FB_OK && !rule->set) s = VERR(v, "the rule changes nothing (give fwd, bwd, dispatch or combine)");
    if (s == FB_OK) {
      lua_getfield(L, -1, "note");
      if (!lua_isnil(L, -1) && lua_type(L, -1) != LUA_TSTRING) s = VERR(v, "note: expected a string");
      lua_pop(L, 1);
    }
    leave(v, m);
    lua_pop(L, 1);
    FB_TRY(s);
    r->nrules++;
  }
  return FB_OK;
}

/* ---- tune ---------------------------------------------------------------------------------------- */
typedef struct {
  const char *name;
  const char *params[FB_TUNE_MAXPARAMS];
  int dflt[FB_TUNE_MAXPARAMS][8]; /* default values, 0-terminated (booleans: -1 = false) */
} family_def;

static const family_def FAMILIES[] = {
    {"gemm", {"tile_m", "tile_n", "tile_k", "stages", "cluster", "consumers", "weights_bf16", "pipe", "mma_k", "pingpong"},
     {{128}, {128, 256}, {64, 128}, {3, 4, 5}, {1, 2}, {1, 2}, {-1, 1}, {-1}, {-1}, {-1}}}, /* pipe, mma_k, pingpong: 0 */
    {"amax", {"rows", "threads"}, {{1, 4}, {256, 512}}},
    {"quant", {"rows", "cols", "threads", "stage", "pair"}, {{16, 32}, {256, 512}, {128, 256}, {-1}, {-1}}}, /* stage, pair: 0 */
    {"requant", {"rows", "cols", "threads", "slots", "half", "pair"}, {{32, 64}, {32, 64}, {128, 256}, {-1}, {-1}, {-1}}}, /* slots, half, pair: 0 */
    {"combine", {"rows", "threads"}, {{1, 4}, {128, 256}}},
    {"router", {"threads"}, {{128, 256}}},
    {"permute", {"threads", "vec"}, {{128, 256}, {4, 8}}},
    {"swiglu", {"rows", "cols", "threads"}, {{4, 16}, {256, 512}, {128, 256}}},
    {"adamw", {"threads", "vec"}, {{256, 512}, {4}}},
};
#define NFAMILIES (int)(sizeof FAMILIES / sizeof FAMILIES[0])

static int is_pow2(long long x) { return x > 0 && !(x & (x - 1)); }
#define CHECK(fn, cond, msg) static const char *fn(long long x) { return (cond) ? NULL : (msg); }
CHECK(ck_tile_m, x == 64 || x == 128 || x == 256, "tile_m takes 64, 128 or 256")
CHECK(ck_tile_n, x >= 8 && x <= 256 && x % 8 == 0, "tile_n takes multiples of 8 up to 256 (wgmma N)")
CHECK(ck_tile_k, (x >= 32 && x <= 512 && x % 32 == 0) || x == 768 || x == 1536,
      "tile_k takes multiples of 32 up to 512, or 768 / 1536 (tcgen05's K = 96 stages)")
CHECK(ck_mma_k, x == 0 || x == 96, "mma_k takes 0 (the MMA's own K) or 96 (tcgen05's K = 96 NVFP4 form, sm_103a)")
CHECK(ck_stages, x >= 1 && x <= 8, "stages takes 1..8")
CHECK(ck_cluster, x == 1 || x == 2 || x == 4, "cluster takes 1, 2 or 4")
CHECK(ck_consumers, x == 1 || x == 2, "consumers takes 1 or 2 warpgroups")
CHECK(ck_bool, x == 0 || x == 1, "weights_bf16 takes true or false")
CHECK(ck_pipe, x >= 0 && x <= 2, "pipe takes 0 (off), 1 or 2 (groups per k-block)")
CHECK(ck_rows, is_pow2(x) && x <= 1024, "rows takes powers of two up to 1024")
CHECK(ck_cols, is_pow2(x) && x >= 16 && x <= 8192, "cols takes powers of two in 16..8192")
CHECK(ck_threads, x >= 32 && x <= 1024 && x % 32 == 0, "threads takes multiples of 32 up to 1024")
CHECK(ck_vec, is_pow2(x) && x <= 16, "vec takes 1, 2, 4, 8 or 16")
CHECK(ck_slots, x == 0 || (x >= 2 && x <= 16), "slots takes 0 (none) or 2..16 (raw ring slots)")
CHECK(ck_half, x == 0 || x == 1, "half takes 0 (the FP32 tile) or 1 (the f16 tile of NVFP4 sources)")
CHECK(ck_stage, x >= 0 && x <= 48, "stage takes 0..48 (KiB of shared memory per warp; 0: none)")
CHECK(ck_pingpong, x == 0 || x == 1, "pingpong takes 0 (consumer warpgroups share a tile) or 1 (they take turns, a tile each)")
CHECK(ck_pair, x == 0 || x == 1, "pair takes 0 (a lane stores its 64-byte BF16 copy alone) or 1 (lane pairs store whole sectors)")

const fb_tune_param FB_TUNE_PARAMS[] = {
    {"tile_m", ck_tile_m, 0}, {"tile_n", ck_tile_n, 0}, {"tile_k", ck_tile_k, 0}, {"stages", ck_stages, 0},
    {"cluster", ck_cluster, 0}, {"consumers", ck_consumers, 0}, {"weights_bf16", ck_bool, 0}, {"pipe", ck_pipe, 1},
    {"rows", ck_rows, 0}, {"cols", ck_cols, 0}, {"threads", ck_threads, 0}, {"vec", ck_vec, 0},
    {"slots", ck_slots, 1}, {"half", ck_half, 1}, {"stage", ck_stage, 1}, {"mma_k", ck_mma_k, 1},
    {"pingpong", ck_pingpong, 1}, {"pair", ck_pair, 1}, {NULL, NULL, 0},
};

const fb_tune_param *fb_tune_param_find(const char *name) {
  for (const fb_tune_param *p = FB_TUNE_PARAMS; p->name; ++p)
    if (!strcmp(p->name, name)) return p;
  return NULL;
}

/* The legal values of a tuning parameter; message on failure. */
static const char *param_check(const char *p, long long x) {
  const fb_tune_param *tp = fb_tune_param_find(p);
  return tp ? tp->check(x) : "unknown parameter";
}

static fb_status read_family(vctx *v, const family_def *fd, int present, fb_tune_family *out) {
  lua_State *L = v->L; /* the family's table is at the top when present */
  int np = 0;
  while (np < FB_TUNE_MAXPARAMS && fd->params[np]) ++np;
  int nvals[FB_TUNE_MAXPARAMS], vals[FB_TUNE_MAXPARAMS][64];
  int is_bool[FB_TUNE_MAXPARAMS];
  for (int p = 0; p < np; ++p) {
    is_bool[p] = !strcmp(fd->params[p], "weights_bf16");
    nvals[p] = 0;
    for (int j = 0; j < 8 && fd->dflt[p][j]; ++j) vals[p][nvals[p]++] = fd->dflt[p][j] < 0 ? 0 : fd->dflt[p][j];
  }
  if (present) {
    const char *keys[FB_TUNE_MAXPARAMS + 2];
    for (int p = 0; p < np; ++p) keys[p] = fd->params[p];
    keys[np] = "keep";
    keys[np + 1] = NULL;
    FB_TRY(check_keys(v, keys));
    for (int p = 0; p < np; ++p) {
      lua_getfield(L, -1, fd->params[p]);
      if (lua_isnil(L, -1)) { lua_pop(L, 1); continue; }
      vmark m = enter(v, ".%s", fd->params[p]);
      fb_status s = FB_OK;
      if (lua_type(L, -1) == LUA_TNUMBER || lua_type(L, -1) == LUA_TBOOLEAN) { /* a single value */
        lua_newtable(L);
        lua_insert(L, -2);
        lua_rawseti(L, -2, 1);
      }
      size_t n = lua_istable(L, -1) ? lua_rawlen(L, -1) : 0;
      if (lua_istable(L, -1)) {
        lua_pushnil(L);
        while (s == FB_OK && lua_next(L, -2)) {
          lua_pop(L, 1);
          if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1 || (size_t)lua_tointeger(L, -1) > n)
            s = VERR(v, "a list of values takes no named keys ('%s')", lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "?");
          if (s != FB_OK) lua_pop(L, 1);
        }
      }
      if (s != FB_OK) {
      } else if (!lua_istable(L, -1)) s = VERR(v, "expected a list of values, got %s", luaL_typename(L, -1));
      else if (n == 0) s = VERR(v, "an empty list (leave the key out for the defaults)");
      else if (n > 64) s = VERR(v, "more than 64 values");
      nvals[p] = 0;
      for (size_t i = 1; i <= n && s == FB_OK; ++i) {
        lua_rawgeti(L, -1, (lua_Integer)i);
        long long x = 0;
        char idx[16];
        snprintf(idx, sizeof idx, "[%zu]", i);
        if (is_bool[p]) {
          if (lua_type(L, -1) != LUA_TBOOLEAN) s = VERR(v, "%s: expected true or false, got %s", idx, luaL_typename(L, -1));
          else x = lua_toboolean(L, -1);
        } else {
          double d;
          s = num_value(v, idx, 1, -1e9, 1e9, &d);
          x = (long long)d;
          const char *why = s == FB_OK ? param_check(fd->params[p], x) : NULL;
          if (why) s = VERR(v, "%s: %lld: %s", idx, x, why);
        }
        for (int j = 0; j < nvals[p] && s == FB_OK; ++j)
          if (vals[p][j] == x) s = VERR(v, "%s: %lld is listed twice", idx, x);
        vals[p][nvals[p]++] = (int)x;
        lua_pop(L, 1);
      }
      leave(v, m);
      lua_pop(L, 1);
      FB_TRY(s);
    }
  }
  long long total = 1;
  for (int p = 0; p < np; ++p) total *= nvals[p];
  if (total > MAX_VARIANTS) return VERR(v, "%lld combinations; at most %d", total, MAX_VARIANTS);
  int has_keep = 0;
  if (present) {
    lua_getfield(L, -1, "keep");
    has_keep = !lua_isnil(L, -1);
    if (has_keep && !lua_isfunction(L, -1)) {
      lua_pop(L, 1);
      return VERR(v, "keep: expected a function(v) returning true or false");
    }
    if (!has_keep) lua_pop(L, 1);
  }
  snprintf(out->family, sizeof out->family, "%s", fd->name);
  out->nparams = np;
  for (int p = 0; p < np; ++p) snprintf(out->param[p], sizeof out->param[p], "%s", fd->params[p]);
  out->values = malloc((size_t)total * np * sizeof(int));
  if (!out->values) return FB_ERR(FB_ENOMEM, "tune");
  out->nvariants = 0;
  int idx[FB_TUNE_MAXPARAMS] = {0};
  fb_status s = FB_OK;
  for (long long t = 0; t < total && s == FB_OK; ++t) {
    long long rem = t;
    for (int p = np - 1; p >= 0; --p) idx[p] = (int)(rem % nvals[p]), rem /= nvals[p];
    int keep = 1;
    if (has_keep) {
      lua_pushvalue(L, -1);
      lua_newtable(L);
      for (int p = 0; p < np; ++p) {
        if (is_bool[p]) lua_pushboolean(L, vals[p][idx[p]]);
        else lua_pushinteger(L, vals[p][idx[p]]);
        lua_setfield(L, -2, fd->params[p]);
      }
      if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
        vmark m = enter(v, ".keep");
        s = VERR(v, "%s", lua_tostring(L, -1) ? lua_tostring(L, -1) : "error");
        leave(v, m);
        lua_pop(L, 1);
        break;
      }
      if (lua_type(L, -1) != LUA_TBOOLEAN) {
        vmark m = enter(v, ".keep");
        s = VERR(v, "returned %s, expected true or false", luaL_typename(L, -1));
        leave(v, m);
      }
      keep = lua_toboolean(L, -1);
      lua_pop(L, 1);
    }
    if (keep && s == FB_OK) {
      for (int p = 0; p < np; ++p) out->values[(size_t)out->nvariants * np + p] = vals[p][idx[p]];
      out->nvariants++;
    }
  }
  if (has_keep) lua_pop(L, 1);
  if (s == FB_OK && out->nvariants == 0) s = VERR(v, "keep() rejects every one of the %lld variants", total);
  return s;
}

static fb_status read_tune(vctx *v, fb_recipe *r, int present) {
  lua_State *L = v->L;
  if (present) {
    const char *keys[NFAMILIES + 1];
    for (int i = 0; i < NFAMILIES; ++i) keys[i] = FAMILIES[i].name;
    keys[NFAMILIES] = NULL;
    FB_TRY(check_keys(v, keys));
  }
  r->families = calloc(NFAMILIES, sizeof *r->families);
  if (!r->families) return FB_ERR(FB_ENOMEM, "tune");
  for (int i = 0; i < NFAMILIES; ++i) {
    int fp = 0;
    if (present) FB_TRY(get_table(v, FAMILIES[i].name, 0, &fp));
    vmark m = enter(v, ".%s", FAMILIES[i].name);
    fb_status s = read_family(v, &FAMILIES[i], fp, &r->families[i]);
    leave(v, m);
    if (fp) lua_pop(L, 1);
    r->nfamilies = i + 1;
    FB_TRY(s);
  }
  return FB_OK;
}

const fb_layer_prec *fb_recipe_layer(const fb_recipe *r, int layer, fb_layer_prec *out) {
  *out = r->base;
  for (int i = 0; i < r->nrules; ++i) {
    const fb_layer_rule *u = &r->rules[i];
    if (layer < u->first || layer > u->last) continue;
    if (u->set & FB_RULE_FWD) out->fwd_act = u->prec.fwd_act, out->fwd_weight = u->prec.fwd_weight;
    if (u->set & FB_RULE_BWD) out->bwd_grad = u->prec.bwd_grad, out->bwd_saved = u->prec.bwd_saved, out->wgrad_rht = u->prec.wgrad_rht;
    if (u->set & FB_RULE_DISPATCH) out->dispatch = u->prec.dispatch, out->dispatch_fwd = u->prec.dispatch_fwd;
    if (u->set & FB_RULE_COMBINE) out->combine = u->prec.combine;
  }
  if (out->dispatch_fwd) out->dispatch = out->fwd_act.format;
  return out;
}

/* Every layer's resolved precision must be one the kernels can run. */
static fb_status check_layers(const fb_recipe *r) {
  for (int l = 1; l <= r->model.layers; ++l) {
    fb_layer_prec p;
    fb_recipe_layer(r, l, &p);
    const char *where = r->base_where, *what = "experts";
    char buf[32];
    for (int i = 0; i < r->nrules; ++i)
      if (l >= r->rules[i].first && l <= r->rules[i].last) {
        where = r->rules[i].where;
        snprintf(buf, sizeof buf, "layers[%d]", i + 1);
        what = buf;
      }
    if (p.dispatch != FB_FMT_BF16 && p.dispatch != p.fwd_act.format)
      return FB_USERERR(FB_EINVAL, "%s: %s.dispatch: layer %d sends %s tokens to a %s forward (give dispatch = \"fwd\", "
                        "\"bf16\" or the forward's format)", where, what, l, fb_format_name(p.dispatch),
                        fb_format_name(p.fwd_act.format));
  }
  return FB_OK;
}

/* The top-level recipe table is at the top of the stack. */
static fb_status validate(vctx *v, fb_recipe *r) {
  lua_State *L = v->L;
  static const char *const keys[] = {"name", "description", "seed", "model", "experts", "layers", "tune",
                                     "parallel", "batch", "gemm", NULL};
  FB_TRY(check_keys(v, keys));
  lua_getfield(L, -1, "name");
  size_t namelen = 0;
  const char *name = lua_tolstring(L, -1, &namelen);
  fb_status s = FB_OK;
  if (lua_isnil(L, -1)) s = VERR(v, "missing required key 'name'");
  else if (lua_type(L, -1) != LUA_TSTRING) s = VERR(v, "name: expected a string, got %s", luaL_typename(L, -1));
  else if (strlen(name) != namelen) s = VERR(v, "name: the string holds a NUL byte");
  else if (!*name || strlen(name) >= sizeof r->name) s = VERR(v, "name: must be 1..%zu characters", sizeof r->name - 1);
  else
    for (const char *c = name; *c && s == FB_OK; ++c)
      if (!islower((unsigned char)*c) && !isdigit((unsigned char)*c) && *c != '_')
        s = VERR(v, "name: '%s': use lower-case letters, digits and _ (it names kernels and cache entries)", name);
  if (s == FB_OK) snprintf(r->name, sizeof r->name, "%s", name);
  lua_pop(L, 1);
  FB_TRY(s);
  lua_getfield(L, -1, "description");
  size_t dl = 0;
  if (!lua_isnil(L, -1) && lua_type(L, -1) != LUA_TSTRING) s = VERR(v, "description: expected a string");
  else if (!lua_isnil(L, -1) && (lua_tolstring(L, -1, &dl), dl >= sizeof r->description))
    s = VERR(v, "description: %zu characters; at most %zu", dl, sizeof r->description - 1);
  else if (!lua_isnil(L, -1) && strlen(lua_tostring(L, -1)) != dl) s = VERR(v, "description: the string holds a NUL byte");
  else if (!lua_isnil(L, -1)) escape(lua_tostring(L, -1), r->description, sizeof r->description);
  lua_pop(L, 1);
  FB_TRY(s);
  long long x;
  FB_TRY(get_int(v, "seed", 0, 0, 0xFFFFFFFFll, 0, &x));
  r->seed = (uint32_t)x;

  int present;
  FB_TRY(get_table(v, "model", 1, &present));
  vmark m = enter(v, ".model");
  s = read_model(v, r);
  leave(v, m);
  lua_pop(L, 1);
  FB_TRY(s);

  FB_TRY(get_table(v, "parallel", 0, &present));
  r->ep = 1;
  if (present) {
    m = enter(v, ".parallel");
    static const char *const pk[] = {"ep", NULL};
    s = check_keys(v, pk);
    if (s == FB_OK) s = get_int(v, "ep", 0, 1, 4096, 1, &x);
    if (s == FB_OK) r->ep = (int)x;
    if (s == FB_OK && r->model.experts % r->ep)
      s = VERR(v, "ep: %d ranks do not divide %d experts", r->ep, r->model.experts);
    leave(v, m);
    lua_pop(L, 1);
    FB_TRY(s);
  }
  FB_TRY(get_table(v, "batch", 0, &present));
  r->tokens = 4096;
  if (present) {
    m = enter(v, ".batch");
    static const char *const bk[] = {"tokens", NULL};
    s = check_keys(v, bk);
    if (s == FB_OK) s = get_int(v, "tokens", 0, 1, 1 << 24, 4096, &x);
    if (s == FB_OK) r->tokens = (int)x;
    leave(v, m);
    lua_pop(L, 1);
    FB_TRY(s);
  }

  FB_TRY(get_table(v, "experts", 1, &present));
  m = enter(v, ".experts");
  snprintf(r->base_where, sizeof r->base_where, "%s", v->where);
  static const char *const ek[] = {"fwd", "bwd", "dispatch", "combine", NULL};
  s = check_keys(v, ek);
  memset(&r->base, 0, sizeof r->base);
  r->base.dispatch_fwd = 1;
  for (int k = 0; k < 4 && s == FB_OK; ++k) s = read_op(v, ek[k], k != 2, &r->base, &present);
  leave(v, m);
  lua_pop(L, 1);
  FB_TRY(s);

  /* gemm = { accumulate = "fp8" | "exact" }: whether MXFP8 GEMMs may sum on the FP8 tensor cores (within 1e-4 of the
     FP64 reference, docs/numerics.md "GEMM accumulation"; the default) or keep BF16 products summed in FP32 (1e-5); it
     applies to every layer (the rules below start from the base) */
  FB_TRY(get_table(v, "gemm", 0, &present));
  if (present) {
    m = enter(v, ".gemm");
    static const char *const gk[] = {"accumulate", NULL};
    s = check_keys(v, gk);
    if (s == FB_OK) {
      lua_getfield(L, -1, "accumulate");
      if (lua_isnil(L, -1)) s = VERR(v, "missing required key 'accumulate' (\"fp8\" or \"exact\")");
      else if (lua_type(L, -1) != LUA_TSTRING) s = VERR(v, "accumulate: expected a string, got %s", luaL_typename(L, -1));
      else if (!strcmp(lua_tostring(L, -1), "exact")) r->base.gemm_exact = 1;
      else if (strcmp(lua_tostring(L, -1), "fp8"))
        s = VERR(v, "accumulate: '%s': \"fp8\" (FP8 tensor cores, within 1e-4) or \"exact\" (BF16 products, 1e-5)",
                 lua_tostring(L, -1));
      lua_pop(L, 1);
    }
    leave(v, m);
    lua_pop(L, 1);
    FB_TRY(s);
  }

  FB_TRY(get_table(v, "layers", 0, &present));
  if (present) {
    m = enter(v, ".layers");
    s = read_rules(v, r);
    leave(v, m);
    lua_pop(L, 1);
    FB_TRY(s);
  }
  FB_TRY(get_table(v, "tune", 0, &present));
  m = enter(v, ".tune");
  s = read_tune(v, r, present);
  leave(v, m);
  if (present) lua_pop(L, 1);
  return s;
}

typedef struct {
  vctx *v;
  fb_recipe *r;
  fb_status rc;
} vcall;

static int validate_protected(lua_State *L) { /* (vcall *, recipe table) */
  vcall *c = lua_touserdata(L, 1);
  c->rc = validate(c->v, c->r);
  if (c->rc == FB_OK) c->rc = check_layers(c->r);
  return 0;
}

/* The message handler: a string message keeps its location when it names a file this load ran; else (no
 * position, a forged one, one in a load()ed chunk) the line of the innermost frame of such a file goes
 * first, so the message still starts with the recipe's own file. */
static int traceback_msgh(lua_State *L) {
  if (!lua_isstring(L, 1)) {
    lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    return 1;
  }
  const char *m = lua_tostring(L, 1);
  if (source_prefix(L, m)) return 1;
  lua_Debug d;
  for (int level = 1; lua_getstack(L, level, &d); ++level) {
    if (!lua_getinfo(L, "Sl", &d) || d.currentline <= 0 || d.source[0] != '@') continue;
    size_t n = strlen(d.source + 1);
    lua_pushfstring(L, "%s:", d.source + 1);
    int known = source_prefix(L, lua_tostring(L, -1)) == n;
    lua_pop(L, 1);
    if (!known) continue;
    lua_pushfstring(L, "%s:%d", d.source + 1, d.currentline);
    push_located(L, m, lua_tostring(L, -1));
    return 1;
  }
  return 1; /* none: fb_recipe_load_buffer names the recipe */
}

/* Make the loader's message start with a file this load ran (see push_located), escaped to one line. */
static fb_status located_error(lua_State *L, fb_status code, const char *m, const char *name) {
  char esc[MSG_MAX], late[96];
  sandbox *sb = sb_of(L);
  if (sb->late && m && !strcmp(m, "not enough memory")) {
    snprintf(late, sizeof late, "wall-clock limit exceeded (%d s): a runaway recipe?", sb->wall_s);
    m = late;
  }
  push_located(L, m ? m : "error", name);
  escape(lua_tostring(L, -1), esc, sizeof esc);
  lua_pop(L, 1);
  return FB_USERERR(code, "%s", esc);
}

fb_status fb_recipe_load_buffer(const char *text, size_t len, const char *name, const char *dir, fb_recipe **out) {
  *out = NULL;
  if (strlen(name) >= FB_RECIPE_PATH_MAX) return FB_USERERR(FB_EINVAL, "%s: the name is longer than %d bytes", name, FB_RECIPE_PATH_MAX - 1);
  sandbox sb = {0};
  if ((size_t)snprintf(sb.dir, sizeof sb.dir, "%s", dir && *dir ? dir : ".") >= sizeof sb.dir)
    return FB_USERERR(FB_EINVAL, "%s: the folder is longer than %d bytes", name, FB_RECIPE_PATH_MAX - 1);
  const char *env = getenv("FOURBIT_RECIPE_TIMEOUT");
  char *end = NULL;
  long secs = env && *env ? strtol(env, &end, 10) : WALL_LIMIT_S;
  if (env && *env && (*end || secs < 1 || secs > 3600))
    return FB_USERERR(FB_EINVAL, "FOURBIT_RECIPE_TIMEOUT: '%s' is not a number of seconds in [1, 3600]", env);
  sb.wall_s = (int)secs;
  lua_State *L = lua_newstate(sb_alloc, &sb);
  if (!L) return FB_ERR(FB_ENOMEM, "lua_newstate");
  fb_recipe *r = calloc(1, sizeof *r);
  fb_status rc = FB_OK;
  if (!r) {
    rc = FB_ERR(FB_ENOMEM, "recipe");
    goto done;
  }
  snprintf(r->path, sizeof r->path, "%s", name);
  lua_pushcfunction(L, open_sandbox);
  if (lua_pcall(L, 0, 0, 0) != LUA_OK) {
    rc = FB_ERR(FB_ELUA, "opening the sandbox: %s", lua_tostring(L, -1));
    goto done;
  }
  add_source(L, name);
  sb.deadline = now_s() + sb.wall_s;
  lua_sethook(L, sb_hook, LUA_MASKCOUNT, 1000);
  lua_pushcfunction(L, traceback_msgh);
  lua_pushfstring(L, "@%s", name);
  if (load_text(L, text, len, lua_tostring(L, -1)) != LUA_OK) { /* binary chunks and C stack overflows: no position */
    rc = located_error(L, FB_ELUA, lua_tostring(L, -1), name);
    goto done;
  }
  lua_remove(L, -2);
  if (lua_pcall(L, 0, 1, 1) != LUA_OK) { /* out of memory, "error in error handling": no position */
    rc = located_error(L, FB_ELUA, lua_tostring(L, -1), name);
    goto done;
  }
  if (!lua_istable(L, -1)) {
    rc = FB_USERERR(FB_EINVAL, "%s: the recipe must return recipe { ... } (it returned %s)", name, luaL_typename(L, -1));
    goto done;
  }
  {
    /* validation reads fields with lua_getfield, which may run a recipe's metamethods or run out of
     * memory: both raise Lua errors, so it runs protected */
    vctx v = {.L = L};
    snprintf(v.where, sizeof v.where, "%s", name);
    locate(L, -1, v.where, sizeof v.where);
    vcall c = {.v = &v, .r = r, .rc = FB_OK};
    lua_pushcfunction(L, validate_protected);
    lua_pushlightuserdata(L, &c);
    lua_pushvalue(L, -3);
    if (lua_pcall(L, 2, 0, 0) != LUA_OK) {
      rc = located_error(L, FB_ELUA, lua_tostring(L, -1), name);
    } else if ((rc = c.rc) != FB_OK && rc != FB_ENOMEM) { /* a table made in load(s, "@other.lua") names other.lua */
      char m[MSG_MAX];
      snprintf(m, sizeof m, "%s", fb_errmsg());
      rc = located_error(L, rc, m, name);
    }
  }
done:
  lua_close(L); /* runs no recipe code: a recipe cannot install a finalizer (see "Time limits") */
  if (rc != FB_OK) {
    fb_recipe_free(r);
    return rc;
  }
  *out = r;
  return FB_OK;
}

fb_status fb_recipe_load(const char *path, fb_recipe **out) {
  *out = NULL;
  if (strlen(path) >= FB_RECIPE_PATH_MAX) return FB_USERERR(FB_EINVAL, "%s: the path is longer than %d bytes", path, FB_RECIPE_PATH_MAX - 1);
  size_t len;
  const char *why = "";
  char *text = read_file(path, &len, &why);
  if (!text) return FB_USERERR(why == WHY_DIR || why == WHY_NOTREG ? FB_EINVAL : FB_EIO, "%s: cannot read the recipe: %s", path, why);
  char dir[FB_RECIPE_PATH_MAX];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  else snprintf(dir, sizeof dir, ".");
  fb_status s = fb_recipe_load_buffer(text, len, path, dir, out);
  free(text);
  return s;
}

void fb_recipe_free(fb_recipe *r) {
  if (!r) return;
  for (int i = 0; i < r->nfamilies; ++i) free(r->families[i].values);
  free(r->families);
  free(r->rules);
  free(r);
}
