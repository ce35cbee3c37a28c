# fourbit — build, test and run.
#   make            build build/fourbit and build/libfourbit.a (installs missing Debian deps as root)
#   make check      the quick CPU tiers (unit tests, the cheap end-to-end ones), under 2 minutes: for every change
#   make test       every CPU test tier (check's, NVRTC, the tuner, the fake driver, fuzzing): what CI runs (no GPU)
#   make test-exhaustive  the sweeps too long for make test (all 2^31 floats, every GPU test kernel variant compiled,
#                   fuzzing 30 s): CI runs it after make test
#   make test-gpu   GPU tests on the device machine (SKIPPED and exit 77 without a GPU, never a pass)
#   build/emu/test_kernels --quick --only SUBSTR   the same GPU tests on the CPU, under a warp emulator (slow)
#   make bench      benchmarks on the device machine
#   make demo       the main job on the default recipe
#   make inspect    read the SASS of every generated kernel for every arch (needs cuobjdump; else SKIPPED, exit 77)
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

.PHONY: all test test-gpu bench demo clean deps golden fuzz fuzz-checkpoint fuzz-cache inspect
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
$(BUILD)/emu/fourbit-worker: $(WORKERDEPS) tests/emu/driver.cpp tests/emu/emu_core.h tests/emu/fb_emu.h tests/emu/tc_model.h tests/emu/fb_tmap_rec.h
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
                           tests/emu/emu_core.h tests/emu/fb_emu.h tests/emu/tc_model.h $(BUILD)/libfourbit.a
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

# cuobjdump for the SASS checks (mk/cuobjdump.sh: the nvidia-cuda-cuobjdump wheel, test-only)
CUOBJDUMP_TEST := $(BUILD)/deps/cuobjdump/bin/cuobjdump
$(CUOBJDUMP_TEST): mk/cuobjdump.sh
	$(Q)bash mk/cuobjdump.sh $(BUILD)/deps/cuobjdump
# The host-side oracles against CUTLASS's headers (tests/cutlass/; the wheel fetched by mk/cutlass.sh, test-only)
CUTLASS_INC := $(BUILD)/deps/cutlass/include
$(CUTLASS_INC)/cute/arch/mma_sm100_desc.hpp: mk/cutlass.sh
	$(Q)bash mk/cutlass.sh $(BUILD)/deps/cutlass
$(BUILD)/tests/cutlass/%: tests/cutlass/%.cpp $(CUTLASS_INC)/cute/arch/mma_sm100_desc.hpp $(TEMPLATES)
	$(Q)mkdir -p $(dir $@)
	@echo "  CXX     $< (CUTLASS headers)"
	$(Q)$(CXX) -std=c++17 -O1 -Wno-deprecated-declarations -Itemplates -Itests -I$(CUTLASS_INC) -I$(CUDA_HOME)/include \
	  -I$(CUDA_HOME)/include/cccl -o $@ $<
# the functional model's decoders and smem operand layout against CUTLASS's (tests/emu/tc_model.h, the model's headers)
$(BUILD)/tests/cutlass/tc_model_layout: tests/emu/tc_model.h tests/emu/emu_core.h tests/emu/fb_emu.h tests/emu/fb_tmap_rec.h \
                                        tests/emu/fb_cvt_model.h

$(BUILD)/tests/tools/gen_table: tests/tools/gen_table.c $(BUILD)/libfourbit.a
	$(Q)mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libfourbit.a $(LDLIBS)

$(BUILD)/tests/tools/%: tests/tools/%.c
	$(Q)mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS) -o $@ $< -lm

# CPU test tiers. Each tier is a target of its own (tier-*, unit/*), run by mk/tier.sh, which prints its wall and
# user+sys time; check, test and test-exhaustive run theirs in a sub-make with -j$(TESTJOBS) (default: one more than
# the cores, as the rank tiers wait on each other), -O (a tier's lines together, when it ends) and -k (every tier
# runs; the status is non-zero if any failed, and make names each failed tier). The longest chains start first (the
# tuner's sweeps, one worker after another); the two NVRTC tiers that compile on 16 threads run at nice 19, filling
# the cores the others leave idle instead of starving them.
#   check            the unit tests of every module (cmocka) and the cheapest end-to-end tiers: quant/dequant, the
#                    bad recipes, the golden plans, train and compare on the CPU, expert parallelism on the CPU, the
#                    cache commands. No NVRTC tier, no fake-driver run, no tuner sweep, no fuzzing: make test has those.
#   test             check's tiers, then fourbit gen (NVRTC), the tuner's sweeps on the emulated worker, the GPU test
#                    kernels compiled for sm_90a (test_kernels: one variant of each spec; test_gemm's kept set,
#                    test_train_gpu, test_train_dev: all), the ASan + UBSan CLI, the Blackwell checks, the GPU train
#                    step's host side on the fake driver, fuzz_recipe for $(TESTFUZZSECS) s, fuzz_checkpoint for
#                    $(TESTFUZZCKPTSECS) s, fuzz_cache (the cache's decoders) for $(TESTFUZZCACHESECS) s.
#   test-exhaustive  the sweeps too long for make test: test_formats --exhaustive (all 2^31 non-negative floats through
#                    the E2M1 RN grid), test_kernels --compile-only over every variant of every spec (352 kernels) and
#                    fuzz_recipe for FUZZSECS (30) s. CI runs make test, then this.
# make test's NVRTC compiles go through build/tests/tools/libnvrtc_memo.so (LD_PRELOAD; tests/tools/nvrtc_memo.c):
# a compile whose whole input (source, headers, options, NVRTC version) an earlier compile of the same make test had
# is answered with that compile's cubin and log; the emulated tuner worker's host compiles likewise (FB_EMU_MEMO,
# tests/emu/driver.cpp: the same command and preprocessed source). The memo is emptied when make test starts: every
# distinct kernel is compiled in every run, once, however many tiers, processes, ranks and workers compile it.
TESTJOBS     ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 2) + 1 )))
TESTFUZZSECS ?= 10
TESTFUZZCKPTSECS ?= 6
MEMO      := $(BUILD)/test-memo
NVRTCMEMO := $(BUILD)/tests/tools/libnvrtc_memo.so
MEMOENV    = FB_NVRTC_MEMO=$(abspath $(MEMO)) FB_NVRTC_MEMO_STATS=$(abspath $(MEMO))/stats.$@ LD_PRELOAD=$(abspath $(NVRTCMEMO)) \
             FB_EMU_MEMO=$(abspath $(MEMO))
TIER      := bash mk/tier.sh
MOCKENV   := LD_LIBRARY_PATH=$(BUILD)/mockcuda
UNITTIERS := $(patsubst $(BUILD)/tests/%,unit/%,$(TESTBIN))
CHECK_TIERS := unit/test_ep unit/test_emu unit/test_train $(filter-out unit/test_ep unit/test_emu unit/test_train,$(UNITTIERS)) \
               tier-recipes-bad tier-ep tier-cli tier-train tier-golden tier-cache tier-layers tier-gen-table
TEST_TIERS  := tier-tune tier-kernels-compile tier-train-gpu tier-ep-gpu tier-train-dev tier-gemm-compile tier-gen tier-gpu-scripts \
               tier-bench-layer tier-names tier-fuzz tier-fuzz-checkpoint tier-fuzz-cache tier-tcgen05-cutlass tier-tc-model-cutlass \
               tier-tc-ops-sass \
               tier-asan-cli tier-portable $(CHECK_TIERS)
EXHAUSTIVE_TIERS := tier-kernels-compile-all tier-formats-exhaustive tier-fuzz-long tier-gemm-compile-archs
.PHONY: check test-exhaustive $(UNITTIERS) $(sort $(TEST_TIERS) $(EXHAUSTIVE_TIERS)) tier-train-gpu-compile tier-train-dev-compile

CHECKDEPS := $(BUILD)/fourbit $(TESTBIN) $(BUILD)/tests/tools/f32tool $(BUILD)/tests/tools/gen_table
check:
	$(Q)$(MAKE) --no-print-directory -j$(TESTJOBS) $(CHECKDEPS)
	$(Q)$(MAKE) --no-print-directory -k -j$(TESTJOBS) -O $(CHECK_TIERS) || { echo "make check: FAILED (make names the tiers above)"; exit 1; }
	@echo "make check: all quick tiers passed (make test runs the rest)"

# what the tiers share, built before them, side by side (make test is run without -j): the sanitized objects the
# fuzzers and the ASan CLI link, the test-only wheels
TESTDEPS := all $(CHECKDEPS) $(NVRTCMEMO) $(BUILD)/mockcuda/libcuda.so.1 $(BUILD)/mockcuda/libcublas.so.13 \
            $(BUILD)/fuzz/fuzz_recipe $(BUILD)/fuzz/fuzz_checkpoint $(BUILD)/fuzz/fuzz_cache $(BUILD)/asan/fourbit \
            $(BUILD)/tests/cutlass/tcgen05_desc $(BUILD)/tests/cutlass/tc_model_layout $(CUOBJDUMP_TEST)
test:
	$(Q)$(MAKE) --no-print-directory -j$(TESTJOBS) $(TESTDEPS)
	$(Q)rm -rf $(MEMO) && mkdir -p $(MEMO)
	$(Q)$(MAKE) --no-print-directory -k -j$(TESTJOBS) -O $(TEST_TIERS) || { echo "make test: FAILED (make names the tiers above)"; exit 1; }
	$(Q)cat $(MEMO)/stats.* 2>/dev/null | awk '{ n[$$1]++ } END { printf "NVRTC: %d kernels compiled, %d compiles answered from the memo\n", n["compiled"], n["hit"] }'
	@echo "make test: all CPU tiers passed"

test-exhaustive: $(BUILD)/tests/test_formats $(BUILD)/fuzz/fuzz_recipe $(BUILD)/gpu/test_kernels $(BUILD)/gpu/test_gemm $(NVRTCMEMO)
	$(Q)$(MAKE) --no-print-directory -k -j$(TESTJOBS) -O $(EXHAUSTIVE_TIERS) || { echo "make test-exhaustive: FAILED"; exit 1; }
	@echo "make test-exhaustive: passed"

$(UNITTIERS): unit/%:
	$(Q)$(TIER) $* -- $(BUILD)/tests/$*
# the tcgen05 descriptors and scale-factor layout (templates/fb_tcgen05.h) against CUTLASS 4.2's (test-only headers)
tier-tcgen05-cutlass: $(BUILD)/tests/cutlass/tcgen05_desc
	$(Q)$(TIER) "tests/cutlass/tcgen05_desc (the Blackwell descriptors against CUTLASS's)" -- $(BUILD)/tests/cutlass/tcgen05_desc
# the functional model's descriptor decoders and smem operand layout (tests/emu/tc_model.h) against CUTLASS 4.2's
# bitfield structs and CuTe's canonical UMMA layouts, with self-tests that must be caught
tier-tc-model-cutlass: $(BUILD)/tests/cutlass/tc_model_layout
	$(Q)$(TIER) "tests/cutlass/tc_model_layout (the model's decoders and operand layout against CUTLASS's)" -- \
	  $(BUILD)/tests/cutlass/tc_model_layout
# the functional model of the tcgen05 / TMA / mbarrier instructions (tests/emu/tc_model.h) and the tile kernel run
# under it (tests/emu/tc_tile_mma.cuh): unit/test_tc_model, one of check's tiers; the headers it is built from
$(BUILD)/tests/test_tc_model: tests/emu/tc_model.h tests/emu/emu_core.h tests/emu/fb_emu.h tests/emu/tc_tile_mma.cuh \
                              tests/emu/fb_tmap_rec.h templates/fb_tc_ops.h templates/fb_tcgen05.h
$(BUILD)/tests/test_emu: tests/emu/emu_core.h tests/emu/fb_emu.h tests/emu/one_variant.h
# the conversion models (tests/emu/fb_cvt_model.h) and the sm_100a NVFP4 quantizers run under them: unit/test_cvt_model
$(BUILD)/tests/test_cvt_model: tests/emu/one_variant.h tests/emu/fb_cvt_model.h tests/emu/emu_core.h tests/emu/fb_emu.h templates/fb_cvt.h templates/fb_formats.h \
                               templates/quant_nvfp4.cuh
# the fake driver writes tensor maps in the layout the functional model reads (tests/emu/fb_tmap_rec.h); make test
# runs test_tc_model under it too, where it also loads through the maps runtime/gemm_host.c encodes
$(BUILD)/mockcuda/libcuda.so.1: tests/emu/fb_tmap_rec.h
TEST_TIERS += tier-tc-model-mock
.PHONY: tier-tc-model-mock
tier-tc-model-mock: $(BUILD)/tests/test_tc_model $(BUILD)/mockcuda/libcuda.so.1
	$(Q)$(TIER) "test_tc_model under the fake driver (runtime/gemm_host.c's tensor maps through the model's TMA)" -- \
	  env $(MOCKENV) FB_REQUIRE_MOCK=1 $(BUILD)/tests/test_tc_model
# templates/gemm_sm100.cuh (the tcgen05 GEMM family) under the model, one build per variant class: unit/test_gemm_sm100
$(BUILD)/tests/test_gemm_sm100: templates/gemm_sm100.cuh templates/fb_gemm.h tests/emu/gemm_sm100_class.h tests/emu/tc_model.h tests/emu/emu_core.h tests/emu/fb_emu.h \
                                tests/emu/fb_tmap_rec.h templates/fb_tc_ops.h templates/fb_tcgen05.h
# the tcgen05 wrappers (templates/fb_tc_ops.h) compile for sm_100a / sm_103a and their SASS holds every form
tier-tc-ops-sass: $(BUILD)/tests/test_tc_ops $(CUOBJDUMP_TEST)
	$(Q)$(TIER) "test_tc_ops (the tcgen05 forms in the SASS, cuobjdump from the wheel)" -- \
	  env FB_REQUIRE_SASS=1 CUOBJDUMP=$(abspath $(CUOBJDUMP_TEST)) NVDISASM_PATH=$(abspath $(dir $(CUOBJDUMP_TEST))) \
	  $(BUILD)/tests/test_tc_ops
# the generator's decision table (gen/templates.c) against its golden digests
tier-gen-table:
	$(Q)$(TIER) tests/test_gen_table.sh -- bash tests/test_gen_table.sh $(BUILD)/tests/tools/gen_table tests/golden/gen_table.sha256 \
	  $(BUILD)/gen_table $(patsubst %,recipes/%.lua,$(GOLDEN))
tier-layers:
	$(Q)$(TIER) "tests/test_layers.sh (base/ includes nothing above it)" -- bash tests/test_layers.sh
# every kernel the GPU expert layer and the resident step request is a plan kernel (stand-in cubins: nothing compiles)
tier-names:
	$(Q)$(MOCKENV) $(TIER) "test_names on the fake driver (every kernel the GPU paths request is a plan kernel)" \
	  --log $(BUILD)/test_names_mock.log -- $(BUILD)/gpu/test_names
# the GEMM variants tests/gpu/run.sh names for compute-sanitizer are ones test_gemm builds (--list, no GPU)
tier-gpu-scripts:
	$(Q)$(TIER) "tests/test_gpu_scripts.sh (make test-gpu's named variants exist)" -- bash tests/test_gpu_scripts.sh $(BUILD)/gpu/test_gemm
tier-cli:
	$(Q)$(TIER) tests/test_cli.sh -- bash tests/test_cli.sh $(BUILD)/fourbit $(BUILD)/tests/tools/f32tool
tier-recipes-bad:
	$(Q)$(TIER) tests/test_recipes_bad.sh -- bash tests/test_recipes_bad.sh $(BUILD)/fourbit
tier-golden:
	$(Q)$(TIER) tests/test_golden.sh -- bash tests/test_golden.sh $(BUILD)/fourbit $(GOLDEN)
tier-train:
	$(Q)$(TIER) "tests/test_train.sh (fourbit train and compare on the CPU)" -- bash tests/test_train.sh $(BUILD)/fourbit
tier-ep:
	$(Q)$(TIER) "tests/test_ep.sh (fourbit train --ranks N: expert parallelism on the CPU)" -- bash tests/test_ep.sh $(BUILD)/fourbit
tier-cache:
	$(Q)$(TIER) tests/test_cache.sh -- bash tests/test_cache.sh $(BUILD)/fourbit $(BUILD)/tests/test_cache
tier-gen:
	$(Q)$(MEMOENV) $(TIER) tests/test_gen.sh -- bash tests/test_gen.sh $(BUILD)/fourbit
tier-tune:
	$(Q)$(MEMOENV) $(TIER) "tests/test_tune.sh (sweeps on the emulated worker)" -- bash tests/test_tune.sh $(BUILD)/fourbit
tier-kernels-compile:
	$(Q)$(MEMOENV) $(TIER) "test_kernels --compile-only --quick (one variant of every GPU test kernel spec compiles for sm_90a)" -- \
	  nice -n 19 $(BUILD)/gpu/test_kernels --compile-only --quick
# every variant of every spec (352 kernels, about 4 minutes of CPU): make test-exhaustive's
tier-kernels-compile-all:
	$(Q)$(MEMOENV) $(TIER) "test_kernels --compile-only (every GPU test kernel and variant compiles for sm_90a; nothing runs)" -- \
	  nice -n 19 $(BUILD)/gpu/test_kernels --compile-only
tier-gemm-compile:
	$(Q)$(MEMOENV) $(TIER) "test_gemm --compile-only (the GEMM variants compile; ptxas: no spills, no wgmma advisories)" \
	  --log $(BUILD)/test_gemm_compile.log -- nice -n 19 $(BUILD)/gpu/test_gemm --compile-only
tier-train-gpu-compile:
	$(Q)$(MEMOENV) $(TIER) "test_train_gpu --compile-only (every kernel of the GPU train step compiles for sm_90a; nothing runs)" -- \
	  $(BUILD)/gpu/test_train_gpu --compile-only
# on the fake driver after --compile-only: the same kernels, answered from the memo
tier-train-gpu: tier-train-gpu-compile
	$(Q)$(MEMOENV) $(MOCKENV) $(TIER) "test_train_gpu on the fake driver (build/mockcuda: the GPU step's host side, kernels as CPU references)" \
	  --log $(BUILD)/test_train_gpu_mock.log -- $(BUILD)/gpu/test_train_gpu
tier-train-dev-compile:
	$(Q)$(MEMOENV) $(TIER) "test_train_dev --compile-only (the GPU-resident step's own kernels compile for sm_90a, sm_100a, sm_103a)" \
	  --log $(BUILD)/test_train_dev_compile.log -- $(BUILD)/gpu/test_train_dev --compile-only
tier-train-dev: tier-train-dev-compile
	$(Q)$(MEMOENV) $(MOCKENV) $(TIER) "test_train_dev on the fake driver (the GPU-resident train step against the host step: bit for bit)" \
	  --log $(BUILD)/test_train_dev_mock.log -- $(BUILD)/gpu/test_train_dev
tier-portable:
	$(Q)$(MEMOENV) $(TIER) "tests/test_portable.sh (the GEMM families per arch; train --device gpu as sm_120a and sm_89 GPUs on the fake driver)" -- \
	  bash tests/test_portable.sh $(BUILD)/fourbit $(BUILD)/mockcuda
tier-gemm-compile-archs:
	$(Q)for a in sm_89 sm_100a sm_103a sm_120a; do $(MEMOENV) $(TIER) "test_gemm --compile-only --arch $$a (the portable GEMMs compile for $$a, no spills; never run)" \
	  --log $(BUILD)/test_gemm_compile_$$a.log -- nice -n 19 $(BUILD)/gpu/test_gemm --compile-only --arch $$a || exit 1; done
tier-ep-gpu:
	$(Q)$(MEMOENV) $(TIER) "tests/test_ep_gpu.sh (fourbit train --device gpu --gpus N on the fake driver: the GPU expert layer's exchanges)" -- \
	  bash tests/test_ep_gpu.sh $(BUILD)/fourbit $(BUILD)/mockcuda
tier-bench-layer:
	$(Q)$(MEMOENV) $(TIER) "tests/test_bench_layer.sh (bench_layer on the fake driver: one rank, and two ranks)" -- \
	  bash tests/test_bench_layer.sh $(BUILD)/gpu/bench_layer $(BUILD)/mockcuda
# One set of objects under ASan + UBSan (clang, -O1; any report aborts), for build/asan/fourbit and the three fuzzers:
# compiled once, with libFuzzer's coverage instrumentation (fuzzer-no-link; the ASan runtime answers its hooks in
# the CLI), except base/sha256.c, whose coverage would only slow the fuzzers down (tests/test_sha256.c checks it).
# tests/test_asan_cli.sh runs quant/dequant, plan, gen into a cache and the cache commands, train with --checkpoint
# and --resume through build/asan/fourbit. (No memo, as fuzz.)
SANCC := clang -g -O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer \
         -std=c11 -D_GNU_SOURCE -pthread -ffp-contract=off $(INCS)
SANOBJ = $(patsubst %.c,$(BUILD)/san/obj/%.o,$(1)) $(BUILD)/san/obj/embedded.o
$(BUILD)/san/obj/%.o: %.c $(DEPSOK)
	$(Q)mkdir -p $(dir $@)
	@echo "  CLANG   $< (ASan + UBSan)"
	$(Q)$(SANCC) $(if $(filter base/sha256.c,$<),,-fsanitize=fuzzer-no-link) -MMD -MP -c $< -o $@
$(BUILD)/san/obj/embedded.o: $(BUILD)/gen/embedded.c
	$(Q)mkdir -p $(dir $@)
	$(Q)$(SANCC) -c $< -o $@
$(BUILD)/asan/fourbit: $(call SANOBJ,$(LIBSRC) $(CLISRC))
	$(Q)mkdir -p $(dir $@)
	@echo "  LD      $@ (ASan + UBSan)"
	$(Q)$(SANCC) -o $@ $^ $(LDLIBS)
-include $(patsubst %.c,$(BUILD)/san/obj/%.d,$(LIBSRC) $(CLISRC))
tier-asan-cli: $(BUILD)/asan/fourbit $(BUILD)/tests/tools/f32tool
	$(Q)$(TIER) "tests/test_asan_cli.sh (the CLI under ASan + UBSan)" -- bash tests/test_asan_cli.sh $(BUILD)/asan/fourbit $(BUILD)/tests/tools/f32tool
# (no memo: the sanitizers' runtime must come first in the fuzzer's libraries)
tier-fuzz:
	$(Q)$(TIER) "fuzz_recipe ($(TESTFUZZSECS) s; make test-exhaustive: FUZZSECS)" -- $(MAKE) --no-print-directory fuzz FUZZSECS=$(TESTFUZZSECS)
tier-fuzz-checkpoint:
	$(Q)$(TIER) "fuzz_checkpoint ($(TESTFUZZCKPTSECS) s over a checkpoint trained now)" -- \
	  $(MAKE) --no-print-directory fuzz-checkpoint FUZZSECS=$(TESTFUZZCKPTSECS)
tier-fuzz-cache:
	$(Q)$(TIER) "fuzz_cache ($(TESTFUZZCACHESECS) s)" -- $(MAKE) --no-print-directory fuzz-cache FUZZCACHESECS=$(TESTFUZZCACHESECS)
tier-fuzz-long:
	$(Q)$(TIER) "fuzz_recipe ($(FUZZSECS) s)" -- $(MAKE) --no-print-directory fuzz FUZZSECS=$(FUZZSECS)
tier-formats-exhaustive:
	$(Q)$(TIER) "test_formats --exhaustive (the E2M1 RN grid over all 2^31 non-negative floats)" -- $(BUILD)/tests/test_formats --exhaustive

# make test's NVRTC memo (see above): only nvrtc* symbols exported, so it never stands in for a program's own sha256
$(NVRTCMEMO): tests/tools/nvrtc_memo.c base/sha256.c $(DEPSOK)
	$(Q)mkdir -p $(dir $@)
	@echo "  CC      $< (make test's NVRTC memo)"
	$(Q)$(CC) -std=gnu11 -O2 -g -fPIC -shared -fvisibility=hidden -Wall -Wextra -Werror -D_GNU_SOURCE $(INCS) -o $@ \
	  tests/tools/nvrtc_memo.c base/sha256.c -ldl -pthread

# On the device machine; where there is no GPU it prints SKIPPED and exits 77 (make: "Error 77"), never a pass.
# They use the carried build/ as it is (no rebuild: the device machine has no Lua or LMDB).
test-gpu:
	$(Q)test -x $(BUILD)/fourbit || { echo "test-gpu: build first (make), then carry build/"; exit 1; }
	$(Q)bash tests/gpu/run.sh $(BUILD)/fourbit

# The machine code of every generated kernel for every arch (cuobjdump: the test-only wheel's unless CUOBJDUMP is set).
inspect: all $(CUOBJDUMP_TEST)
	$(Q)CUOBJDUMP=$${CUOBJDUMP:-$(abspath $(CUOBJDUMP_TEST))} NVDISASM_PATH=$(abspath $(dir $(CUOBJDUMP_TEST))) \
	  bash tests/inspect_sass.sh $(BUILD)/fourbit

bench:
	$(Q)test -x $(BUILD)/fourbit || { echo "bench: build first (make), then carry build/"; exit 1; }
	$(Q)bash tests/gpu/bench.sh $(BUILD)/fourbit

demo: all $(BUILD)/tests/tools/f32tool
	$(Q)bash mk/demo.sh $(BUILD)/fourbit $(BUILD)/tests/tools/f32tool

# Golden plans of the shipped recipes: regenerate after an intended change, and review the diff.
golden: all $(BUILD)/tests/tools/gen_table
	$(Q)bash tests/test_gen_table.sh $(BUILD)/tests/tools/gen_table /dev/null $(BUILD)/gen_table $(patsubst %,recipes/%.lua,$(GOLDEN)) > /dev/null; \
	  [ $$? -ne 2 ] || { echo "golden: gen_table failed (tests/test_gen_table.sh says why): no digests written"; exit 1; }; \
	  cp $(BUILD)/gen_table/now.sha256 tests/golden/gen_table.sha256 && echo "  golden  gen_table.sha256"
	$(Q)for r in $(GOLDEN); do $(BUILD)/fourbit plan recipes/$$r.lua > tests/golden/plan_$$r.txt && \
	  $(BUILD)/fourbit plan --json recipes/$$r.lua > tests/golden/plan_$$r.json && echo "  golden  $$r"; done
	$(Q)rm -rf $(BUILD)/golden-gen && $(BUILD)/fourbit gen recipes/tiny.lua --only quant_nvfp4_4o6_tok_row --out $(BUILD)/golden-gen > /dev/null && \
	  cp $(BUILD)/golden-gen/quant_nvfp4_4o6_tok_row_sm90a_r16_t256.cu tests/golden/gen_quant_nvfp4_4o6_tok_row_sm90a_r16_t256.cu && echo "  golden  gen_quant_nvfp4_4o6_tok_row_sm90a_r16_t256.cu"

# libFuzzer on the recipe loader and the plan (clang, ASan + UBSan), FUZZSECS seconds over a corpus of
# the shipped recipes and the bad-recipe fixtures. A crash, leak or sanitizer report fails the run.
FUZZSRC := $(sort $(wildcard base/*.c runtime/*.c recipes/*.c gen/*.c cache/*.c)) # cache/: the runtime's GPU step reads and writes cubins
# every fuzzer: its driver (-fsanitize=fuzzer) over the shared sanitized objects of the library it reaches
$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(call SANOBJ,$(FUZZSRC))
	$(Q)mkdir -p $(dir $@)
	@echo "  CLANG   $@"
	$(Q)$(SANCC) -fsanitize=fuzzer -o $@ $< $(call SANOBJ,$(FUZZSRC)) $(LDLIBS)
fuzz: $(BUILD)/fuzz/fuzz_recipe
	$(Q)rm -rf $(BUILD)/fuzz/corpus && mkdir -p $(BUILD)/fuzz/corpus && cp recipes/*.lua $(BUILD)/fuzz/corpus/ && \
	  { cp tests/fixtures/recipes/*.lua $(BUILD)/fuzz/corpus/ 2>/dev/null || true; }
	@echo "== fuzz_recipe for $(FUZZSECS) s"
	$(Q)$(BUILD)/fuzz/fuzz_recipe -max_total_time=$(FUZZSECS) -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
	  -dict=tests/fuzz/recipe.dict -artifact_prefix=$(BUILD)/fuzz/ $(BUILD)/fuzz/corpus 2>$(BUILD)/fuzz/log.txt || \
	  { tail -40 $(BUILD)/fuzz/log.txt; echo "fuzz_recipe FAILED: see $(BUILD)/fuzz/log.txt"; exit 1; }
	$(Q)grep -E "^stat::number_of_executed_units|^Done" $(BUILD)/fuzz/log.txt | tr '\n' ' '; echo

# libFuzzer on the checkpoint reader (fb_train_load_buffer), FUZZSECS seconds over a seed corpus of one real
# checkpoint that build/fourbit trains now and a few of its first bytes (the short inputs), of the model tests/fuzz/fuzz_checkpoint.c loads into (FUZZ_CKPT_RUN: change
# both together); the seed must load first (FOURBIT_FUZZ_MUST_LOAD), so a drift between the two fails the run.
FUZZ_CKPT_RUN := recipes/tiny.lua --model-override micro --layers 3 --d-model 32 --experts 2 --top-k 1 --vocab 16 --steps 2
fuzz-checkpoint: $(BUILD)/fuzz/fuzz_checkpoint $(BUILD)/fourbit
	$(Q)rm -rf $(BUILD)/fuzz/ckpt-corpus && mkdir -p $(BUILD)/fuzz/ckpt-corpus && \
	  $(BUILD)/fourbit train $(FUZZ_CKPT_RUN) --quiet --checkpoint $(BUILD)/fuzz/ckpt-corpus/seed.ckpt > /dev/null && \
	  for n in 8 12 44 200 400; do head -c $$n $(BUILD)/fuzz/ckpt-corpus/seed.ckpt > $(BUILD)/fuzz/ckpt-corpus/head$$n; done
	$(Q)FOURBIT_FUZZ_MUST_LOAD=1 $(BUILD)/fuzz/fuzz_checkpoint $(BUILD)/fuzz/ckpt-corpus/seed.ckpt 2>$(BUILD)/fuzz/ckpt-log.txt || \
	  { tail -20 $(BUILD)/fuzz/ckpt-log.txt; echo "fuzz_checkpoint: the seed checkpoint does not load"; exit 1; }
	@echo "== fuzz_checkpoint for $(FUZZSECS) s"
	$(Q)$(BUILD)/fuzz/fuzz_checkpoint -max_total_time=$(FUZZSECS) -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
	  -artifact_prefix=$(BUILD)/fuzz/ckpt- $(BUILD)/fuzz/ckpt-corpus 2>$(BUILD)/fuzz/ckpt-log.txt || \
	  { tail -40 $(BUILD)/fuzz/ckpt-log.txt; echo "fuzz_checkpoint FAILED: see $(BUILD)/fuzz/ckpt-log.txt"; exit 1; }
	$(Q)grep -E "^stat::number_of_executed_units|^Done" $(BUILD)/fuzz/ckpt-log.txt | tr '\n' ' '; echo
# libFuzzer on the cache's decoders (tests/fuzz/fuzz_cache.c: stored values, records, export files), FUZZCACHESECS
# seconds over the seeds build/tests/test_cache --fuzz-seeds writes from a filled cache.
FUZZCACHESECS ?= 30
TESTFUZZCACHESECS ?= 7
fuzz-cache: $(BUILD)/fuzz/fuzz_cache $(BUILD)/tests/test_cache
	$(Q)rm -rf $(BUILD)/fuzz/cache-corpus && mkdir -p $(BUILD)/fuzz/cache-corpus && \
	  $(BUILD)/tests/test_cache --fuzz-seeds $(BUILD)/fuzz/cache-corpus > /dev/null && rm -rf $(BUILD)/fuzz/cache-corpus/cache
	@echo "== fuzz_cache for $(FUZZCACHESECS) s"
	$(Q)$(BUILD)/fuzz/fuzz_cache -max_total_time=$(FUZZCACHESECS) -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
	  -artifact_prefix=$(BUILD)/fuzz/cache- $(BUILD)/fuzz/cache-corpus 2>$(BUILD)/fuzz/cache-log.txt || \
	  { tail -40 $(BUILD)/fuzz/cache-log.txt; echo "fuzz_cache FAILED: see $(BUILD)/fuzz/cache-log.txt"; exit 1; }
	$(Q)grep -E "^stat::number_of_executed_units|^Done" $(BUILD)/fuzz/cache-log.txt | tr '\n' ' '; echo

# ---- libfourbit.so and the Python package (python/fourbit) -------------------------------------------------------
# The C ABI (include/fourbit/libfourbit.h, lib/abi.c) as build/libfourbit.so: the library's objects again, position-
# independent (build/pic/), only fourbit_* exported (lib/libfourbit.map). Debian's Lua and LMDB archives are not
# position-independent, so their shared libraries are copied into build/lib/ and found there ($ORIGIN/lib): build/
# carried to another machine brings them. NVRTC as the binaries link it; libcuda.so.1 and libnccl.so.2 by dlopen.
# Python tiers (make test): tests/python/ under pytest, numpy and pytest pinned in build/pydeps (mk/pydeps.sh).
#   tier-python        fourbit.quantize / dequantize against build/fourbit quant / dequant byte for byte, every
#                      format and option; plan, info, cache and the error paths
#   tier-python-layer  fourbit.Layer (the ABI's GPU expert layer) on the fake driver against bench_layer --dump:
#                      y, dx, dW13, dW2, dtopk_w byte-identical for the same inputs (kernels are CPU references there)
SOLIB    := $(BUILD)/libfourbit.so
PICOBJ   := $(patsubst %.c,$(BUILD)/pic/%.o,$(LIBSRC) lib/abi.c) $(BUILD)/pic/embedded.o
SODEPS   := $(BUILD)/lib/liblua5.4.so.0 $(BUILD)/lib/liblmdb.so.0
PYDEPS   := $(BUILD)/pydeps/.ok
PYENV     = PYTHONPATH=$(abspath $(BUILD)/pydeps):$(abspath python) FOURBIT_LIB=$(abspath $(SOLIB)) FOURBIT_CLI=$(abspath $(BUILD)/fourbit)
all: $(SOLIB)
$(BUILD)/pic/%.o: %.c $(DEPSOK)
	$(Q)mkdir -p $(dir $@)
	@echo "  CC      $< (-fPIC)"
	$(Q)$(CC) $(CFLAGS) -fPIC -MMD -MP -c $< -o $@
$(BUILD)/pic/embedded.o: $(BUILD)/gen/embedded.c $(DEPSOK)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) -fPIC -c $< -o $@
$(BUILD)/lib/%.so.0: $(DEPSOK)
	$(Q)mkdir -p $(dir $@)
	$(Q)cp -L $(LIBDIR)/$*.so.0 $@
$(SOLIB): $(PICOBJ) lib/libfourbit.map $(SODEPS)
	@echo "  LD      $@ (ABI $(shell sed -n 's/^#define FOURBIT_ABI_VERSION //p' include/fourbit/libfourbit.h))"
	$(Q)$(CC) -shared -o $@ -Wl,-soname,libfourbit.so.1 -Wl,--version-script=lib/libfourbit.map -Wl,-z,defs $(PICOBJ) \
	  $(SODEPS) -Wl,-rpath,'$$ORIGIN/lib' -L$(CUDA_HOME)/lib64 -lnvrtc -Wl,-rpath,$(CUDA_HOME)/lib64 -ldl -lm -pthread
	$(Q)ln -sf libfourbit.so $(BUILD)/libfourbit.so.1 # the soname, for programs linked with -lfourbit
-include $(PICOBJ:.o=.d)
$(PYDEPS): mk/pydeps.sh mk/python-test-requirements.txt
	$(Q)bash mk/pydeps.sh $(BUILD)/pydeps && touch $@
TEST_TIERS += tier-python tier-python-layer
TESTDEPS   += $(SOLIB) $(PYDEPS)
.PHONY: tier-python tier-python-layer
tier-python: $(SOLIB) $(BUILD)/fourbit $(PYDEPS)
	$(Q)$(PYENV) $(TIER) "tests/python (the Python package: quantizers against fourbit quant byte for byte, plan, info, errors)" -- \
	  python3 -m pytest -q -p no:cacheprovider tests/python/test_fourbit.py
# On the device machine, with build/ carried (never rebuilds): tests/gpu/python_gpu.sh (MoEExperts against bench_layer
# byte for byte, two runs, S1 time within 5%, the example trains); SKIPPED and exit 77 without a GPU or torch.
test-python-gpu:
	$(Q)test -f $(SOLIB) && test -x $(BUILD)/gpu/bench_layer || { echo "test-python-gpu: build first (make), then carry build/"; exit 1; }
	$(Q)bash tests/gpu/python_gpu.sh
.PHONY: test-python-gpu
tier-python-layer: $(SOLIB) $(BUILD)/gpu/bench_layer $(BUILD)/mockcuda/libcuda.so.1 $(NVRTCMEMO) $(PYDEPS)
	$(Q)$(MEMOENV) $(PYENV) LD_LIBRARY_PATH=$(abspath $(BUILD)/mockcuda) FOURBIT_BENCH_LAYER=$(abspath $(BUILD)/gpu/bench_layer) FOURBIT_MOCKCUDA=$(abspath $(BUILD)/mockcuda) \
	  $(TIER) "tests/python/test_layer_mock.py (fourbit.Layer on the fake driver against bench_layer --dump, byte for byte)" -- \
	  python3 -m pytest -q -p no:cacheprovider tests/python/test_layer_mock.py

clean:
	rm -rf $(BUILD)

-include $(LIBOBJ:.o=.d) $(CLIOBJ:.o=.d) $(CHECKOBJ:.o=.d)
