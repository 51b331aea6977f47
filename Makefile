# lancet: the entry points a newcomer needs.
#   make deps   install Debian packages and Python test tools (idempotent)
#   make        build (Release) -> build/lancet
#   make test   deps + default model + build + all test suites (+ sanitizer and fuzz runs)
#   make run    deps + build + default model + start the server on it (http://127.0.0.1:8000)
JOBS ?= $(shell nproc)
BUILD ?= build
MODEL ?= models/SmolLM2-135M-Instruct.Q4_1.gguf
CMAKE_FLAGS ?=

.PHONY: all build deps model test test-unit test-sanitize test-fuzz run chat clean

all: build

deps:
	@tools/install_deps.sh

model:
	@tools/fetch_model.sh

build:
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) > /dev/null
	@cmake --build $(BUILD) -j $(JOBS)

test-unit: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE gpu

# The model-file parsers again under ASan + UBSan (corrupt-file cases).
test-sanitize:
	@tools/run_sanitized_tests.sh

# Bounded libFuzzer runs of the parsers (clang, ASan + UBSan).
test-fuzz:
	@tools/run_fuzz.sh $(FUZZ_SECONDS)

test: deps model
	@$(MAKE) --no-print-directory test-unit
	@$(MAKE) --no-print-directory test-sanitize
	@$(MAKE) --no-print-directory test-fuzz

HOST ?= 127.0.0.1
PORT ?= 8000
run: deps model build
	@$(BUILD)/lancet serve --model $(MODEL) --host $(HOST) --port $(PORT)

# Chat with the default model in the terminal instead.
chat: deps model build
	@$(BUILD)/lancet run --model $(MODEL)

clean:
	rm -rf $(BUILD) build-sanitize
