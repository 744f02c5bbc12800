# The README's two commands: `make book` and `make test`. Both create or
# update .venv from this project's own files first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# every package's version, resolved once (`make lock`): nbval compares
# stored outputs strictly, so a new numpy or matplotlib must not change them
LOCK   := requirements.lock
# 2 cores, 4+ ranks: let MPICH ranks yield the CPU instead of spinning.
export MPIR_CVAR_CH4_PROGRESS_THROTTLE ?= 1
export MPIR_CVAR_POLLS_BEFORE_YIELD ?= 100
export PYDEVD_DISABLE_FILE_VALIDATION := 1

.PHONY: venv lock test unit book check-site check-lab lab notebooks clean site-picture

venv: $(STAMP)

$(STAMP): pyproject.toml $(LOCK)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c $(LOCK) -e ".[mpi,book,test]"
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

## re-resolve every version from pyproject.toml's bounds (deliberately: then
## `make notebooks` and `make test`, and commit the three together)
lock:
	rm -rf .lock-venv
	$(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip install --quiet --upgrade pip
	.lock-venv/bin/python -m pip install --quiet -e ".[mpi,book,test]"
	{ echo "# pip constraints: every version \`make venv\` installs, resolved by"; \
	  echo "# \`make lock\` with $$(.lock-venv/bin/python -V) on $$(date -u +%F)"; \
	  .lock-venv/bin/python -m pip freeze --exclude-editable; } > $(LOCK)
	rm -rf .lock-venv

## every test: unit, multi-process (sockets and mpiexec), notebooks, the book
## build, the site and JupyterLab checks. The stages run side by side (they
## mostly wait on ranks, kernels and a browser), each stage's output is
## printed whole when it ends, then a table of how long each took
## (tools/test_stages.py; `--serial` runs them one after another)
test: venv
	$(BIN)/python tools/test_stages.py

## every internal link and #anchor of the built site, then every page of
## _toc.yml in headless Chromium (tables, formulas, figures, widgets,
## console; launch and download buttons; search); screenshots in
## _build/screenshots. The browser part is skipped, saying so, where
## chromium is not installed (apt-get install chromium).
check-site: venv
	$(BIN)/python tools/check_links.py _build/html
	$(BIN)/python tools/check_site.py _build/html --out _build/screenshots

## docs/site.png, the README's picture of the built site (after `make book`)
site-picture: venv
	$(BIN)/python tools/site_picture.py _build/html/book/ch03_ring.html docs/site.png

## every chapter run in JupyterLab as a reader would (Run All, move a
## slider) in headless Chromium: errors, stretched images, cut labels, live
## redraws; screenshots in _build/lab-screenshots. Skipped without chromium.
## LAB_SHARD=I/N checks every N-th notebook from the I-th (make test runs
## two shards side by side: the check mostly waits on kernels and a browser)
check-lab: venv
	$(BIN)/python tools/check_lab.py --out _build/lab-screenshots \
	  $(if $(LAB_SHARD),--shard $(LAB_SHARD))

## fast unit tests only (the inner loop: under a minute on 2 cores)
unit: venv
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 2 \
	  -m "not mpi and not multiproc and not slow"

## the executed static site in _build/html, then each notebook's execution
## time from jupyter-cache (a table, and _build/notebook_times.json; fails
## when one took over NOTEBOOK_LIMIT_S seconds). jupyter-cache re-runs a
## notebook only when its code cells change, so a change to warmup_kit drops
## the cache (and Sphinx's doctrees, or it would not re-read the unchanged
## notebooks).
JB_CACHE := _build/.jupyter_cache
NOTEBOOK_LIMIT_S ?= 60
book: venv
	@if [ -d $(JB_CACHE) ] && [ -n "$$(find src labs -name '*.py' -newer $(JB_CACHE))" ]; then \
	  echo "warmup_kit changed since the last build: re-executing notebooks"; \
	  rm -rf $(JB_CACHE) _build/.doctrees; fi
	WARMUP_KIT_STATIC=1 $(BIN)/jupyter-book build . -W -n --keep-going
	@touch $(JB_CACHE)
	$(BIN)/python tools/notebook_times.py --limit $(NOTEBOOK_LIMIT_S)

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
## (as root, in a container, JupyterLab refuses to start without --allow-root)
lab: venv
	$(BIN)/jupyter lab book/ $$([ "$$(id -u)" = 0 ] && echo --allow-root)

clean:
	rm -rf _build .pytest_cache
