# klua: one Makefile. `make` builds build/klua; `make test`, `make demo` and
# the other work targets first run scripts/build/bootstrap, which installs the
# Debian packages that target needs and are missing.

PKGS      := lua5.4 lua5.4-cjson libcurl yaml-0.1 simdjson libmicrohttpd libzstd
BUILD     ?= build
CC        ?= cc
CXX       ?= c++
OPT       ?= -O2
SAN       ?=
# Warnings are errors for whoever works on klua (a git checkout, and so CI);
# a release build from an exported tree keeps them warnings: a newer compiler
# must not break a user's build. Set WERROR= or WERROR=-Werror to choose.
WERROR    ?= $(if $(wildcard .git),-Werror,)
WARN      := -Wall -Wextra $(WERROR)
CFLAGS    += -std=c11 -D_GNU_SOURCE $(OPT) -g -fPIC $(WARN) $(SAN) $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
CXXFLAGS  += -std=c++17 $(OPT) -g -fPIC $(WARN) $(SAN) $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LDLIBS    += $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lm
# The spec module is loaded by the lua5.4 interpreter, which provides Lua itself.
TESTLIBS  := $(filter-out -llua5.4,$(LDLIBS))

# src/ holds the product by pipeline stage (docs/architecture.md), test/c the spec
# module's C; objects mirror those folders under $(BUILD).
STAGES    := base conn wire cache lua cli
TESTSRC   := $(wildcard test/c/*.c)
CSRC      := $(filter-out src/cli/main.c,$(foreach d,$(STAGES),$(wildcard src/$(d)/*.c)))
CXXSRC    := $(foreach d,$(STAGES),$(wildcard src/$(d)/*.cc))
# lua/klua holds klua's Lua library by audience: the modules a script calls (lua/klua/*.lua),
# klua's private helpers (internal/) and the commands written in Lua (cmd/: klua watch,
# klua __complete), all embedded; lua/klua/testing.lua is the test harness (docs/testing.md):
# it runs under busted, not in a controller's script environment, so it is installed beside
# the binary, not embedded. The live page (internal/ui.html, docs/ui.md) is embedded too, as
# a module that returns its text.
LUASRC    := $(filter-out lua/klua/testing.lua,$(wildcard lua/klua/*.lua lua/klua/internal/*.lua lua/klua/cmd/*.lua))
EMBEDSRC  := $(LUASRC) lua/klua/internal/ui.html
CORE_OBJ  := $(CSRC:%.c=$(BUILD)/%.o) $(CXXSRC:%.cc=$(BUILD)/%.o) $(BUILD)/lua_embedded.o
TEST_OBJ  := $(TESTSRC:%.c=$(BUILD)/%.o)
DEPS      := $(CORE_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(BUILD)/src/cli/main.d

.PHONY: all test demo bench soak fuzz fuzz-smoke test-asan clean bootstrap pkgcheck install uninstall \
        man completion docs deb

all: pkgcheck $(BUILD)/klua $(BUILD)/klua_testing.so

# The targets that build first (test, demo, fuzz, ...) compile JOBS files at once.
JOBS      ?= $(shell nproc 2>/dev/null || echo 2)

bootstrap:
	@sh scripts/build/bootstrap build

# A missing library is named with the Debian package that provides it,
# rather than left to fail as a missing header half-way through the build.
PKG_DEB   := lua5.4:liblua5.4-dev lua5.4-cjson:lua-cjson-dev libcurl:libcurl4-openssl-dev \
             yaml-0.1:libyaml-dev simdjson:libsimdjson-dev libmicrohttpd:libmicrohttpd-dev libzstd:libzstd-dev
pkgcheck:
	@command -v pkg-config >/dev/null || { echo "klua: pkg-config is missing: install pkg-config (or run make bootstrap)" >&2; exit 1; }
	@for m in $(PKG_DEB); do pkg-config --exists "$${m%%:*}" || \
	  { echo "klua: library $${m%%:*} not found by pkg-config: install the Debian package $${m#*:} (or run make bootstrap)" >&2; exit 1; }; done

CFLAGS    += -Isrc
CXXFLAGS  += -Isrc

# Order-only: under -j a missing library is named before any compiler error.
$(BUILD)/%.o: %.c | pkgcheck
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/lua_embedded.c: $(EMBEDSRC) scripts/build/embed-lua | $(BUILD)
	python3 scripts/build/embed-lua $@ $(EMBEDSRC)

$(BUILD)/lua_embedded.o: $(BUILD)/lua_embedded.c
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/%.o: %.cc | pkgcheck
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/klua: $(CORE_OBJ) $(BUILD)/src/cli/main.o
	$(CXX) $(SAN) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/klua_testing.so: $(CORE_OBJ) $(TEST_OBJ)
	$(CXX) $(SAN) -shared -o $@ $^ $(TESTLIBS)

$(BUILD):
	mkdir -p $@

test:
	@sh scripts/build/bootstrap test
	@$(MAKE) -j$(JOBS) --no-print-directory all
	@KLUA_BUILD=$(BUILD) sh scripts/build/run-specs $(SPEC)

test-asan:
	@sh scripts/build/bootstrap test
	@$(MAKE) -j$(JOBS) --no-print-directory all BUILD=build-asan OPT=-O1 \
	  SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
	@KLUA_BUILD=build-asan KLUA_ASAN=1 sh scripts/build/run-specs $(SPEC)

# libFuzzer targets, one per fuzz/fuzz_*.c (fuzz/README.md): built with clang
# into build-fuzz/, each run for SECONDS on a copy of its corpus; a crash fails.
SECONDS   ?= 60
FUZZ      := $(patsubst fuzz/%.c,%,$(wildcard fuzz/fuzz_*.c))
FUZZ_SAN  := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
DEPS      += $(FUZZ:%=$(BUILD)/%.d)

fuzz:
	@sh scripts/build/bootstrap fuzz
	@$(MAKE) -j$(JOBS) --no-print-directory BUILD=build-fuzz CC=clang CXX=clang++ OPT=-O1 \
	  SAN="$(FUZZ_SAN) -fsanitize=fuzzer-no-link" $(FUZZ:%=build-fuzz/%)
	@sh fuzz/run build-fuzz $(SECONDS) $(FUZZ)

fuzz-smoke:
	@$(MAKE) --no-print-directory fuzz SECONDS=10

$(BUILD)/fuzz_%.o: fuzz/fuzz_%.c | $(BUILD)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/fuzz_%: $(BUILD)/fuzz_%.o $(CORE_OBJ)
	$(CXX) $(SAN) -fsanitize=fuzzer -o $@ $^ $(LDLIBS)

demo:
	@sh scripts/build/bootstrap demo
	@$(MAKE) -j$(JOBS) --no-print-directory all
	@sh scripts/demo

bench:
	@sh scripts/build/bootstrap bench
	@$(MAKE) -j$(JOBS) --no-print-directory all $(BUILD)/bench-limit
	@python3 scripts/bench $(BENCH_ARGS)

# The bench's `limit` row (docs/benchmarks.md): simdjson alone on the watch stream. Bench-only
# code, kept out of src/ and linked with simdjson alone.
$(BUILD)/bench-limit: scripts/benchlib/limit.cc | pkgcheck $(BUILD)
	$(CXX) -std=c++17 $(OPT) $(WARN) $(shell pkg-config --cflags simdjson 2>/dev/null) -o $@ $< \
	  $(shell pkg-config --libs simdjson 2>/dev/null)

# The chaos soak (docs/reliability.md): DURATION seconds of random changes and faults.
DURATION  ?= 600

soak:
	@sh scripts/build/bootstrap test
	@$(MAKE) -j$(JOBS) --no-print-directory all
	@python3 scripts/soak --duration $(DURATION) --klua $(BUILD)/klua

# The man pages and the shell completions, made from the built klua: klua(1),
# klua-run(1), klua-watch(1), klua-record(1), klua-replay(1), klua-webhook-config(1) and
# klua-test(1) from its help
# (scripts/build/gen-man; kubectl-klua(1) and kubectl_complete-klua(1) are .so links to klua(1)), whose flags
# come from the flag table of src/cli/cli.c and watch's FLAGS in
# lua/klua/cmd/watch.lua; klua-lua(7) and docs/api.md from the doc comments in
# lua/klua (scripts/build/gen-api); the completions from `klua completion SHELL`.
# docs/install.md says why these tools.
VERSION    = $(shell sed -n 's/^\#define KLUA_VERSION "\(.*\)"/\1/p' src/base/version.h)
MAN1      := $(BUILD)/man/klua.1 $(BUILD)/man/klua-run.1 $(BUILD)/man/klua-watch.1 \
             $(BUILD)/man/klua-record.1 $(BUILD)/man/klua-replay.1 $(BUILD)/man/klua-webhook-config.1 \
             $(BUILD)/man/klua-test.1 \
             $(BUILD)/man/kubectl-klua.1 $(BUILD)/man/kubectl_complete-klua.1
MAN7      := $(BUILD)/man/klua-lua.7
COMPLETIONS := $(BUILD)/completion/klua.bash $(BUILD)/completion/_klua $(BUILD)/completion/klua.fish

man: $(MAN1) $(MAN7)
completion: $(COMPLETIONS)
DIAGRAMS  := docs/img/reflector.svg docs/img/runtime.svg docs/img/pipeline.svg
docs: docs/api.md $(DIAGRAMS)

# The state machines drawn from their tables as docs/architecture.md prints them
# (each checked against the code by a spec), and the pipeline; spec/tools/diagrams_spec.lua
# checks the committed pictures are these.
$(DIAGRAMS) &: docs/architecture.md scripts/build/gen-diagrams
	python3 scripts/build/gen-diagrams

$(MAN1) &: $(BUILD)/klua scripts/build/gen-man
	@mkdir -p $(BUILD)/man
	python3 scripts/build/gen-man $(BUILD)/klua $(BUILD)/man

$(MAN7): $(LUASRC) scripts/build/gen-api
	@mkdir -p $(@D)
	python3 scripts/build/gen-api man lua/klua $(VERSION) > $@.tmp && mv $@.tmp $@

docs/api.md: $(LUASRC) scripts/build/gen-api
	python3 scripts/build/gen-api md lua/klua > $@.tmp && mv $@.tmp $@

$(BUILD)/completion/klua.bash: $(BUILD)/klua
	@mkdir -p $(@D)
	$(BUILD)/klua completion bash > $@
$(BUILD)/completion/_klua: $(BUILD)/klua
	@mkdir -p $(@D)
	$(BUILD)/klua completion zsh > $@
$(BUILD)/completion/klua.fish: $(BUILD)/klua
	@mkdir -p $(@D)
	$(BUILD)/klua completion fish > $@

# `make install` (PREFIX, DESTDIR as usual): the binary, which carries its
# Lua library inside and reads nothing from this tree; kubectl-klua beside
# it, so that `kubectl klua ...` finds it as a plugin; the examples; the
# test harness and the sandbox server it starts, under share/klua in the
# tree's own layout (lua/klua/testing.lua, scripts/), which is how the
# harness and `klua test` find them (docs/testing.md).
# The man pages and completions go where man, bash-completion, zsh and fish
# look for them under PREFIX: zsh's fpath holds share/zsh/site-functions
# under /usr/local, and under /usr Debian's zsh reads packages' functions
# from share/zsh/vendor-completions (ZSHDIR= overrides, for other layouts).
# kubectl_complete-klua beside the plugin is what kubectl 1.26+ runs to
# complete `kubectl klua ...`. The documentation keeps the tree's layout
# (README.md, docs/, examples/) so that the README's links resolve.
PREFIX    ?= /usr/local
BINDIR    := $(PREFIX)/bin
DOCDIR    := $(PREFIX)/share/doc/klua
DATADIR   := $(PREFIX)/share/klua
MANDIR    := $(PREFIX)/share/man
BASHDIR   := $(PREFIX)/share/bash-completion/completions
ZSHDIR    ?= $(if $(filter /usr,$(PREFIX)),$(PREFIX)/share/zsh/vendor-completions,$(PREFIX)/share/zsh/site-functions)
FISHDIR   := $(PREFIX)/share/fish/vendor_completions.d
INSTALLED := $(DESTDIR)$(BINDIR)/klua $(DESTDIR)$(BINDIR)/kubectl-klua $(DESTDIR)$(BINDIR)/kubectl_complete-klua \
             $(DESTDIR)$(DOCDIR) $(DESTDIR)$(DATADIR) \
             $(MAN1:$(BUILD)/man/%=$(DESTDIR)$(MANDIR)/man1/%) $(MAN7:$(BUILD)/man/%=$(DESTDIR)$(MANDIR)/man7/%) \
             $(DESTDIR)$(BASHDIR)/klua $(DESTDIR)$(ZSHDIR)/_klua $(DESTDIR)$(FISHDIR)/klua.fish

install: pkgcheck $(BUILD)/klua $(MAN1) $(MAN7) $(COMPLETIONS)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(DOCDIR)/docs/img $(DESTDIR)$(DATADIR)/lua/klua \
	  $(DESTDIR)$(DATADIR)/scripts/sandbox $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man7 \
	  $(DESTDIR)$(BASHDIR) $(DESTDIR)$(ZSHDIR) $(DESTDIR)$(FISHDIR)
	install -m 755 $(BUILD)/klua $(DESTDIR)$(BINDIR)/klua
	ln -sf klua $(DESTDIR)$(BINDIR)/kubectl-klua
	install -m 755 scripts/kubectl_complete-klua $(DESTDIR)$(BINDIR)/kubectl_complete-klua
	install -m 644 examples/*.lua examples/*.yaml examples/README.md $(DESTDIR)$(DOCDIR)/examples
	install -m 644 README.md $(DESTDIR)$(DOCDIR)
	install -m 644 docs/*.md $(DESTDIR)$(DOCDIR)/docs
	install -m 644 docs/img/* $(DESTDIR)$(DOCDIR)/docs/img
	install -m 644 lua/klua/testing.lua $(DESTDIR)$(DATADIR)/lua/klua
	install -m 755 scripts/sandbox-apiserver $(DESTDIR)$(DATADIR)/scripts
	install -m 644 scripts/sandbox/*.py $(DESTDIR)$(DATADIR)/scripts/sandbox
	install -m 644 $(MAN1) $(DESTDIR)$(MANDIR)/man1
	install -m 644 $(MAN7) $(DESTDIR)$(MANDIR)/man7
	install -m 644 $(BUILD)/completion/klua.bash $(DESTDIR)$(BASHDIR)/klua
	install -m 644 $(BUILD)/completion/_klua $(DESTDIR)$(ZSHDIR)/_klua
	install -m 644 $(BUILD)/completion/klua.fish $(DESTDIR)$(FISHDIR)/klua.fish

uninstall:
	rm -rf $(INSTALLED)

# `make deb`: a Debian package, built by debhelper from debian/ (docs/install.md):
# build/klua_VERSION_ARCH.deb. It compiles in $(BUILD)/deb with Debian's build
# flags, apart from the objects of `make`, and again only what changed.
deb:
	@sh scripts/build/bootstrap deb
	dpkg-checkbuilddeps
	DEB_OUT=$(BUILD) debian/rules binary

clean:
	rm -rf build build-asan build-fuzz

-include $(DEPS)
