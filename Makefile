# understudy — the two commands a newcomer needs:
#   make demo   install everything, build, boot the lab and show the main job
#   make test   install everything, build, run all tests
# Both are idempotent; `python3 -m lab setup` installs what is missing (as root).

PYTHON ?= python3

.PHONY: setup build demo test clean

setup:
	$(PYTHON) -m lab setup

build: setup
	$(MAKE) -C runtime
	$(MAKE) -C host
	$(MAKE) -C lab/swifi/poke

demo: build
	$(PYTHON) -m lab demo

test: build
	$(PYTHON) -m pytest

clean:
	$(MAKE) -C runtime clean
	$(MAKE) -C host clean
	$(MAKE) -C lab/swifi/poke clean
