# fourbit — build, test and run.
#   make            build build/fourbit and build/libfourbit.a (installs missing Debian deps as root)
#   make test       CPU test tiers: what CI runs on every stop (no GPU needed)
#   make test-gpu   GPU tests on the device machine (say plainly when skipped)
#   build/emu/test_kernels --quick --only SUBSTR   the same GPU tests on the CPU, under a warp emulator (slow)
#   make bench      benchmarks on the device machine
#   make demo       the main job on the default recipe
#   make inspect    read the SASS of every generated kernel for every arch (needs cuobjdump)
#   make clean      remove build/
#   V=1             show full commands
CUDA_HOME ?= /usr/local/cuda
CC        ?= gcc
CXX       ?= g++
BUILD     := build
MULTIARCH := $(shell $(CC) -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
LIBDIR    := /usr/lib/$(MULTIARCH)

Q := @
ifeq ($(V),1)
Q :=
endif

INCS     := -Iinclude -Ibase -Iruntime -Igen -Itemplates -I/usr/include/lua5.4 -I$(CUDA_HOME)/include
CFLAGS   := -std=c11 -O2 -g -Wall -Wextra -Werror -ffp-contract=off -D_GNU_SOURCE -pthread $(INCS)
CXXFLAGS := -std=c++17 -O2 -g -Wall -Wextra -ffp-contract=off -pthread $(INCS)
# Lua and LMDB statically; NVRTC dynamically; libnccl.so.2 and libcuda.so.1 by dlopen (never linked).
LDLIBS   := $(LIBDIR)/liblua5.4.a $(LIBDIR)/liblmdb.a -L$(CUDA_HOME)/lib64 -lnvrtc \
            -Wl,-rpath,$(CUDA_HOME)/lib64 -ldl -lm -pthread

LIBSRC := $(sort $(wildcard base/*.c runtime/*.c gen/*.c tuner/*.c cache/*.c recipes/*.c))
TEMPLATES := $(sort $(wildcard templates/*.h templates/*.cuh))
LIBOBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(LIBSRC)) $(BUILD)/obj/embedded.o
CLISRC := $(sort $(wildcard cli/*.c))
CLIOBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(CLISRC))
TESTC  := $(sort $(wildcard tests/test_*.c))
TESTCXX:= $(sort $(wildcard tests/test_*.cpp))
TESTBIN:= $(patsubst tests/%.c,$(BUILD)/tests/%,$(TESTC)) $(patsubst tests/%.cpp,$(BUILD)/tests/%,$(TESTCXX))
DEPSOK := $(BUILD)/.deps-ok

GOLDEN := inkling2_small nvidia_nvfp4 mxfp8 bf16 tiny
FUZZSECS ?= 30

.PHONY: all test test-gpu bench demo clean deps golden fuzz inspect
GPUTOOLS := $(BUILD)/gpu/test_kernels $(BUILD)/gpu/bench $(BUILD)/gpu/test_gemm $(BUILD)/gpu/test_train_gpu $(BUILD)/gpu/bench_layer \
            $(BUILD)/gpu/test_train_dev $(BUILD)/gpu/test_names
all: $(BUILD)/fourbit $(BUILD)/libfourbit.a $(GPUTOOLS) $(BUILD)/emu/test_kernels $(BUILD)/fourbit-worker $(BUILD)/emu/fourbit-worker

# The tuner's check harness (tuner/check/: every kernel against its CPU reference, the GEMMs against FP64), linked
# into the worker and the GPU tests; an archive of its own, not libfourbit.a: its globals are the harness's state.
CHECKSRC := $(sort $(wildcard tuner/check/*.c))
CHECKOBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(CHECKSRC))
CHECKLIB := $(BUILD)/libfourbit-check.a
$(CHECKLIB): $(CHECKOBJ)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^

# The tuner's measuring process (fourbit tune starts it beside build/fourbit): tuner/check/'s checks, linked
# with the driver; the emu one links the warp emulator instead (tests/test_tune.sh runs a sweep with it on the CPU).
WORKERDEPS := tuner/worker/worker.c tuner/tune.h tuner/check/harness.h tuner/check/gemm_harness.h $(CHECKLIB) $(BUILD)/libfourbit.a
$(BUILD)/fourbit-worker: $(WORKERDEPS)
	@echo "  CC      tuner/worker/worker.c"
	$(Q)$(CC) $(CFLAGS) -Ituner/check -o $@ tuner/worker/worker.c $(CHECKLIB) $(BUILD)/libfourbit.a $(LDLIBS)
$(BUILD)/emu/fourbit-worker: $(WORKERDEPS) tests/emu/driver.cpp tests/emu/emu_core.h tests/emu/fb_emu.h
	$(Q)mkdir -p $(dir $@)
	@echo "  CC      tuner/worker/worker.c (emulated driver)"
	$(Q)$(CXX) $(CXXFLAGS) -Ituner/check -c tests/emu/driver.cpp -o $(BUILD)/emu/driver_worker.o
	$(Q)$(CC) $(CFLAGS) -Ituner/check -o $@ tuner/worker/worker.c $(CHECKLIB) $(BUILD)/emu/driver_worker.o \
	  $(BUILD)/libfourbit.a $(LDLIBS) -lstdc++

# A fake libcuda.so.1 (tests/gpu/mock_libcuda.c): make test runs the GPU train step's host side on the CPU with it, every
# kernel carried out by its CPU reference (it checks buffers, sizes, launch parameters and the data flow, not kernels).
$(BUILD)/mockcuda/libcuda.so.1: tests/gpu/mock_libcuda.c runtime/ops.c base/error.c runtime/numerics.c base/str.c gen/kname.c \
                                runtime/model_dense.c $(DEPSOK)
	$(Q)mkdir -p $(dir $@)
	@echo "  CC      $< (a fake CUDA driver)"
	$(Q)$(CC) -std=gnu11 -O2 -g -fPIC -shared -ffp-contract=off -Wall -Wextra -Wno-unused-parameter -Werror -D_GNU_SOURCE $(INCS) \
	  -o $@ $(filter %.c,$^) -lm
# ... and a fake libcublas.so.13 beside it (tests/gpu/mock_libcublas.c): cublasGemmEx as the CPU path's GEMMs compute it.
$(BUILD)/mockcuda/libcublas.so.13: tests/gpu/mock_libcublas.c $(DEPSOK)
	$(Q)mkdir -p $(dir $@)
	@echo "  CC      $< (a fake cuBLAS)"
	$(Q)$(CC) -std=gnu11 -O2 -g -fPIC -shared -ffp-contract=off -Wall -Wextra -Wno-unused-parameter -Werror -D_GNU_SOURCE $(INCS) \
	  -o $@ $< -ldl

# GPU test and benchmark programs: built here with everything else, run on the device machine.
# test_gemm shares its GEMM checks with the tuner's worker (tuner/check/gemm_harness.c)
$(BUILD)/gpu/test_gemm: tests/gpu/test_gemm.c tuner/check/gemm_harness.h tuner/check/harness.h $(CHECKLIB) $(BUILD)/libfourbit.a
	$(Q)mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS) -Ituner/check -o $@ $< $(CHECKLIB) $(BUILD)/libfourbit.a $(LDLIBS)
$(BUILD)/gpu/%: tests/gpu/%.c tuner/check/harness.h $(CHECKLIB) $(BUILD)/libfourbit.a
	$(Q)mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS) -Ituner/check -o $@ $< $(CHECKLIB) $(BUILD)/libfourbit.a $(LDLIBS)

# The GPU test harness on the CPU: test_kernels linked against tests/emu/driver.cpp, which compiles each generated
# kernel with the host C++ compiler and runs it under the warp emulator (tests/emu/emu_core.h). Where no GPU is at
# hand; slow, so: build/emu/test_kernels --quick --only SUBSTR (from the repository root).
$(BUILD)/emu/test_kernels: tests/gpu/test_kernels.c tuner/check/harness.h $(CHECKLIB) tests/emu/driver.cpp \
                           tests/emu/emu_core.h tests/emu/fb_emu.h $(BUILD)/libfourbit.a
	$(Q)mkdir -p $(dir $@)
	@echo "  CXX     tests/emu/driver.cpp"
	$(Q)$(CXX) $(CXXFLAGS) -Ituner/check -c tests/emu/driver.cpp -o $(BUILD)/emu/driver.o
	$(Q)$(CC) $(CFLAGS) -Ituner/check -o $@ tests/gpu/test_kernels.c $(CHECKLIB) $(BUILD)/emu/driver.o \
	  $(BUILD)/libfourbit.a $(LDLIBS) -lstdc++

deps: $(DEPSOK)
$(DEPSOK): mk/deps.sh
	$(Q)mkdir -p $(BUILD)
	$(Q)bash mk/deps.sh
	$(Q)touch $@

$(BUILD)/obj/%.o: %.c $(DEPSOK)
	$(Q)mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

# templates/ go into the library as strings: NVRTC gets them from memory.
$(BUILD)/embed: mk/embed.c
	$(Q)mkdir -p $(BUILD)
	$(Q)$(CC) -O1 -o $@ $<
$(BUILD)/gen/embedded.c: $(BUILD)/embed $(TEMPLATES)
	$(Q)mkdir -p $(dir $@)
	@echo "  EMBED   $(TEMPLATES)"
	$(Q)$(BUILD)/embed $@ $(TEMPLATES)
$(BUILD)/obj/embedded.o: $(BUILD)/gen/embedded.c $(DEPSOK)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libfourbit.a: $(LIBOBJ)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/fourbit: $(CLIOBJ) $(BUILD)/libfourbit.a
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $(CLIOBJ) $(BUILD)/libfourbit.a $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(BUILD)/libfourbit.a
	$(Q)mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS) -Wno-unused-parameter -o $@ $< $(BUILD)/libfourbit.a -lcmocka $(LDLIBS)

$(BUILD)/tests/%: tests/%.cpp $(BUILD)/libfourbit.a
	$(Q)mkdir -p $(dir $@)
	@echo "  CXX     $<"
	$(Q)$(CXX) $(CXXFLAGS) -o $@ $< $(BUILD)/libfourbit.a -lcmocka $(LDLIBS)

$(BUILD)/tests/tools/%: tests/tools/%.c
	$(Q)mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS) -o $@ $< -lm

# CPU tiers, what CI runs: unit tests of every module, then the CLI end to end.
test: all $(TESTBIN) $(BUILD)/tests/tools/f32tool $(BUILD)/mockcuda/libcuda.so.1 $(BUILD)/mockcuda/libcublas.so.13
	$(Q)echo "== tests/test_layers.sh (base/ includes nothing above it)"; bash tests/test_layers.sh
	$(Q)set -e; for t in $(TESTBIN); do echo "== $$t"; $$t; done
	$(Q)echo "== tests/test_cli.sh"; bash tests/test_cli.sh $(BUILD)/fourbit $(BUILD)/tests/tools/f32tool
	$(Q)echo "== tests/test_recipes_bad.sh"; bash tests/test_recipes_bad.sh $(BUILD)/fourbit
	$(Q)echo "== tests/test_golden.sh"; bash tests/test_golden.sh $(BUILD)/fourbit $(GOLDEN)
	$(Q)echo "== tests/test_gen.sh"; bash tests/test_gen.sh $(BUILD)/fourbit
	$(Q)echo "== tests/test_train.sh (fourbit train and compare on the CPU)"; bash tests/test_train.sh $(BUILD)/fourbit
	$(Q)echo "== tests/test_ep.sh (fourbit train --ranks N: expert parallelism on the CPU)"; bash tests/test_ep.sh $(BUILD)/fourbit
	$(Q)echo "== tests/test_cache.sh"; bash tests/test_cache.sh $(BUILD)/fourbit $(BUILD)/tests/test_cache
	$(Q)echo "== tests/test_tune.sh (sweeps on the emulated worker)"; bash tests/test_tune.sh $(BUILD)/fourbit
	$(Q)echo "== test_kernels --compile-only (every GPU test kernel compiles for sm_90a; nothing runs)"; $(BUILD)/gpu/test_kernels --compile-only
	$(Q)echo "== test_gemm --compile-only (the GEMM variants compile; ptxas: no spills, no wgmma advisories)"; $(BUILD)/gpu/test_gemm --compile-only > $(BUILD)/test_gemm_compile.log || { cat $(BUILD)/test_gemm_compile.log; exit 1; }; tail -1 $(BUILD)/test_gemm_compile.log
	$(Q)echo "== test_train_gpu --compile-only (every kernel of the GPU train step compiles for sm_90a; nothing runs)"; $(BUILD)/gpu/test_train_gpu --compile-only
	$(Q)echo "== test_train_dev --compile-only (the GPU-resident step's own kernels compile for sm_90a, sm_100a, sm_103a)"; \
	  $(BUILD)/gpu/test_train_dev --compile-only > $(BUILD)/test_train_dev_compile.log 2>&1 || \
	  { cat $(BUILD)/test_train_dev_compile.log; exit 1; }; tail -1 $(BUILD)/test_train_dev_compile.log
	$(Q)echo "== test_train_gpu on the fake driver (build/mockcuda: the GPU step's host side, kernels as CPU references)"; \
	  LD_LIBRARY_PATH=$(BUILD)/mockcuda $(BUILD)/gpu/test_train_gpu > $(BUILD)/test_train_gpu_mock.log 2>&1 || \
	  { cat $(BUILD)/test_train_gpu_mock.log; exit 1; }; tail -1 $(BUILD)/test_train_gpu_mock.log
	$(Q)echo "== test_train_dev on the fake driver (the GPU-resident train step against the host step: bit for bit)"; \
	  LD_LIBRARY_PATH=$(BUILD)/mockcuda $(BUILD)/gpu/test_train_dev > $(BUILD)/test_train_dev_mock.log 2>&1 || \
	  { cat $(BUILD)/test_train_dev_mock.log; exit 1; }; tail -1 $(BUILD)/test_train_dev_mock.log
	$(Q)echo "== test_names on the fake driver (every kernel the GPU expert layer and resident step request is a plan kernel)"; \
	  LD_LIBRARY_PATH=$(BUILD)/mockcuda $(BUILD)/gpu/test_names > $(BUILD)/test_names_mock.log 2>&1 || \
	  { cat $(BUILD)/test_names_mock.log; exit 1; }; tail -1 $(BUILD)/test_names_mock.log
	$(Q)echo "== tests/test_ep_gpu.sh (fourbit train --device gpu --gpus N on the fake driver: the GPU expert layer's exchanges)"; \
	  bash tests/test_ep_gpu.sh $(BUILD)/fourbit $(BUILD)/mockcuda
	$(Q)echo "== tests/test_bench_layer.sh (bench_layer on the fake driver: one rank, and two ranks)"; \
	  bash tests/test_bench_layer.sh $(BUILD)/gpu/bench_layer $(BUILD)/mockcuda
	$(Q)$(MAKE) --no-print-directory fuzz FUZZSECS=$(FUZZSECS)
	@echo "make test: all CPU tiers passed"

# On the device machine; where there is no GPU it prints SKIPPED, which never counts as passed.
# They use the carried build/ as it is (no rebuild: the device machine has no Lua or LMDB).
test-gpu:
	$(Q)test -x $(BUILD)/fourbit || { echo "test-gpu: build first (make), then carry build/"; exit 1; }
	$(Q)bash tests/gpu/run.sh $(BUILD)/fourbit

# The machine code of every generated kernel for every arch (cuobjdump; SKIPPED without one).
inspect: all
	$(Q)bash tests/inspect_sass.sh $(BUILD)/fourbit

bench:
	$(Q)test -x $(BUILD)/fourbit || { echo "bench: build first (make), then carry build/"; exit 1; }
	$(Q)bash tests/gpu/bench.sh $(BUILD)/fourbit

demo: all $(BUILD)/tests/tools/f32tool
	$(Q)bash mk/demo.sh $(BUILD)/fourbit $(BUILD)/tests/tools/f32tool

# Golden plans of the shipped recipes: regenerate after an intended change, and review the diff.
golden: all
	$(Q)for r in $(GOLDEN); do $(BUILD)/fourbit plan recipes/$$r.lua > tests/golden/plan_$$r.txt && \
	  $(BUILD)/fourbit plan --json recipes/$$r.lua > tests/golden/plan_$$r.json && echo "  golden  $$r"; done
	$(Q)rm -rf $(BUILD)/golden-gen && $(BUILD)/fourbit gen recipes/tiny.lua --only quant_nvfp4_4o6_tok_row --out $(BUILD)/golden-gen > /dev/null && \
	  cp $(BUILD)/golden-gen/quant_nvfp4_4o6_tok_row_sm90a_r16_t256.cu tests/golden/gen_quant_nvfp4_4o6_tok_row_sm90a_r16_t256.cu && echo "  golden  gen_quant_nvfp4_4o6_tok_row_sm90a_r16_t256.cu"

# libFuzzer on the recipe loader and the plan (clang, ASan + UBSan), FUZZSECS seconds over a corpus of
# the shipped recipes and the bad-recipe fixtures. A crash, leak or sanitizer report fails the run.
FUZZSRC := $(sort $(wildcard base/*.c runtime/*.c recipes/*.c gen/*.c cache/*.c)) # cache/: the runtime's GPU step reads and writes cubins
$(BUILD)/fuzz/fuzz_recipe: tests/fuzz/fuzz_recipe.c $(FUZZSRC) $(BUILD)/gen/embedded.c $(DEPSOK) $(wildcard base/*.h runtime/*.h include/*.h include/fourbit/*.h)
	$(Q)mkdir -p $(dir $@)
	@echo "  CLANG   $@"
	$(Q)clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -DINSTR_LIMIT=20000000LL \
	  -D_GNU_SOURCE -ffp-contract=off $(INCS) -o $@ tests/fuzz/fuzz_recipe.c $(FUZZSRC) $(BUILD)/gen/embedded.c $(LDLIBS)
fuzz: $(BUILD)/fuzz/fuzz_recipe
	$(Q)rm -rf $(BUILD)/fuzz/corpus && mkdir -p $(BUILD)/fuzz/corpus && cp recipes/*.lua $(BUILD)/fuzz/corpus/ && \
	  { cp tests/fixtures/recipes/*.lua $(BUILD)/fuzz/corpus/ 2>/dev/null || true; }
	@echo "== fuzz_recipe for $(FUZZSECS) s"
	$(Q)$(BUILD)/fuzz/fuzz_recipe -max_total_time=$(FUZZSECS) -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
	  -dict=tests/fuzz/recipe.dict -artifact_prefix=$(BUILD)/fuzz/ $(BUILD)/fuzz/corpus 2>$(BUILD)/fuzz/log.txt || \
	  { tail -40 $(BUILD)/fuzz/log.txt; echo "fuzz_recipe FAILED: see $(BUILD)/fuzz/log.txt"; exit 1; }
	$(Q)grep -E "^stat::number_of_executed_units|^Done" $(BUILD)/fuzz/log.txt | tr '\n' ' '; echo

clean:
	rm -rf $(BUILD)

-include $(LIBOBJ:.o=.d) $(CLIOBJ:.o=.d) $(CHECKOBJ:.o=.d)
