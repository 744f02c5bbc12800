# The README's two commands: `make book` and `make test`. Both create or
# update .venv from this project's own files first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# 2 cores, 4+ ranks: let MPICH ranks yield the CPU instead of spinning.
export MPIR_CVAR_CH4_PROGRESS_THROTTLE ?= 1
export MPIR_CVAR_POLLS_BEFORE_YIELD ?= 100
export PYDEVD_DISABLE_FILE_VALIDATION := 1

.PHONY: venv test unit book lab notebooks clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[mpi,book,test]"
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

## every test: unit, multi-process (sockets and mpiexec), notebooks, the book build
test: venv
	$(BIN)/python -m pytest -q tests
	$(BIN)/python -m pytest -q -p no:cacheprovider --nbval book
	$(MAKE) book

## fast unit tests only
unit: venv
	$(BIN)/python -m pytest -q -m "not mpi and not multiproc and not slow"

## the executed static site in _build/html. jupyter-cache re-runs a notebook
## only when its code cells change, so a change to warmup_kit drops the cache
## (and Sphinx's doctrees, or it would not re-read the unchanged notebooks).
## Where chromium is installed, a built widget is then dragged headless.
JB_CACHE := _build/.jupyter_cache
book: venv
	@if [ -d $(JB_CACHE) ] && [ -n "$$(find src labs -name '*.py' -newer $(JB_CACHE))" ]; then \
	  echo "warmup_kit changed since the last build: re-executing notebooks"; \
	  rm -rf $(JB_CACHE) _build/.doctrees; fi
	WARMUP_KIT_STATIC=1 $(BIN)/jupyter-book build . -W -n --keep-going
	@touch $(JB_CACHE)
	@if command -v chromium >/dev/null 2>&1; then \
	  $(BIN)/python tools/check_widget.py _build/html/book/ch03_ring.html; \
	else echo "chromium not installed: skipping tools/check_widget.py"; fi

## re-run every chapter and lab notebook in place (their stored outputs are
## what nbval compares against); no ipywidgets state is stored, so the site
## fetches no widget manager from a CDN
notebooks: venv
	for nb in book/*.ipynb; do \
	  $(BIN)/jupyter nbconvert --to notebook --execute --inplace \
	    --ExecutePreprocessor.timeout=600 \
	    --ExecutePreprocessor.store_widget_state=False "$$nb" || exit 1; \
	  $(BIN)/python tools/strip_widget_state.py "$$nb"; \
	done

## JupyterLab on the book
lab: venv
	$(BIN)/jupyter lab book/

clean:
	rm -rf _build .pytest_cache
