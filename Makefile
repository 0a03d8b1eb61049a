# lumen — the two set-up commands are `make run` and `make test` (see README.md).
SHELL := /bin/bash
JOBS ?= $(shell nproc)
MODEL ?= ../shared/models/TinyStories-656K/TinyStories-656K-Q8_0.gguf
PROMPT ?= Once upon a time
export LUMEN_SHARED ?= $(abspath ../shared)

.PHONY: all deps build build-dev run test test-release test-asan clean

all: build

deps:
	@./scripts/setup.sh

build/build.ninja: | deps
	cmake --preset release > /dev/null

build-dev/build.ninja: | deps
	cmake --preset dev > /dev/null

build: deps build/build.ninja
	cmake --build build -j $(JOBS)

# The untrusted-input parsers' test binaries (and the kernels', for hostile weight blocks),
# rebuilt with AddressSanitizer + UBSan.
ASAN_TARGETS := lumen_gguf_tests lumen_tokenizer_tests lumen_server_tests lumen_convert_tests lumen_kernels_tests lumen_grammar_tests

build-dev: deps build-dev/build.ninja
	cmake --build build-dev -j $(JOBS) --target $(ASAN_TARGETS)

run: build
	build/lumen run -m "$(MODEL)" -p "$(PROMPT)" -n 64

# Every test: the release build's full suite, then the untrusted-input parsers
# (GGUF, safetensors, llama2.c, tokenizer, HTTP framing and request parsers, imatrix files,
# GBNF and JSON Schema, ordered JSON, tool calls and reasoning in model output) and the
# kernels' hostile-block tests (Iq*.*, KernelsHostile.*) and the quantizers (QuantizeRef.*, whose
# rows come from untrusted weight files) again
# under AddressSanitizer + UBSan. Timing tests (LinearTime) run in the release suite only:
# under ASan they measure the sanitizer, not the algorithm.
test: test-release test-asan

test-release: build
	cd build && ctest --output-on-failure -j $(JOBS)

test-asan: build-dev
	cd build-dev && ctest --output-on-failure -j $(JOBS) -R 'Fuzz|Gguf|Safetensors|Llama2c|Tokenizer|Imatrix|^HttpParser|Gbnf|JsonSchema|^OrderedJson\.|^Tool[A-Za-z]*\.|^ReasoningSplit\.|^Iq[A-Za-z]*\.|^KernelsHostile\.|^QuantizeRef\.' -E 'LinearTime'

clean:
	rm -rf build build-dev build-bench
