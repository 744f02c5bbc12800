"""What the built site must contain, read from ``_toc.yml`` and
``_config.yml``: the pages, and where each page's launch, repository and
download buttons must point. Used by ``tools/check_site.py`` (which reads
the buttons off the rendered page in Chromium); plain Python, no browser.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

# the launch services of Jupyter Book 1.x's ``launch_buttons`` and the
# text of the menu entry the theme writes for each
# pages the build writes that are not the book's (search has its own check)
SKIP_PAGES = {"genindex.html", "search.html"}
SERVICES = {"binderhub_url": "Binder", "jupyterhub_url": "JupyterHub",
            "colab_url": "Colab"}


def toc_entries(toc: dict) -> list[str]:
    """Every ``file`` of a ``_toc.yml`` (root first), in order, however
    deep the parts, chapters and sections nest."""
    found = [toc["root"]] if toc.get("root") else []

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                found.append(node["file"])
            for key in ("parts", "chapters", "sections"):
                walk(node.get(key, []))
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk({k: v for k, v in toc.items() if k != "root"})
    return found


def load_yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def toc_pages(repo: Path) -> list[tuple[str, Path | None]]:
    """(page name without suffix, its source file or None) for every
    entry of the repository's ``_toc.yml``."""
    out = []
    for entry in toc_entries(load_yaml(repo / "_toc.yml")):
        stem = entry.rsplit(".", 1)[0] if entry.endswith((".md", ".ipynb")) \
            else entry
        src = next((repo / f"{stem}{ext}" for ext in (".ipynb", ".md")
                    if (repo / f"{stem}{ext}").is_file()), None)
        out.append((stem, src))
    return out


def launch_config(repo: Path) -> dict:
    """The repository and launch settings the buttons are built from."""
    cfg = load_yaml(repo / "_config.yml")
    r = cfg.get("repository") or {}
    lb = cfg.get("launch_buttons") or {}
    return {
        "url": (r.get("url") or "").rstrip("/"),
        "branch": r.get("branch") or "main",
        "path_to_book": (r.get("path_to_book") or "").strip("/"),
        "interface": lb.get("notebook_interface", "classic"),
        "services": {SERVICES[k]: lb[k].rstrip("/") for k in SERVICES
                     if lb.get(k)},
        "repository_button": bool((cfg.get("html") or {})
                                  .get("use_repository_button")),
    }


def _repo_path(cfg: dict, page: str) -> str:
    """The notebook's path inside the repository, as launch URLs name it."""
    return f"{cfg['path_to_book']}/{page}.ipynb".lstrip("/")


def check_launch(cfg: dict, page: str, links: dict[str, str]) -> list[str]:
    """Problems with a notebook page's launch menu; ``links`` maps each
    entry's text (``Binder``) to its href."""
    bad = []
    url = cfg["url"]
    parts = urlsplit(url)
    owner_repo = parts.path.strip("/")
    path = _repo_path(cfg, page)
    for service, base in cfg["services"].items():
        if service == "Colab" and parts.netloc != "github.com":
            continue                     # the theme offers Colab for GitHub only
        href = links.get(service)
        if href is None:
            bad.append(f"no {service} launch button")
            continue
        if not href.startswith(base + "/"):
            bad.append(f"{service} button goes to {href}, not {base}")
            continue
        got = unquote(href)
        if service == "JupyterHub":
            q = parse_qs(urlsplit(href).query)
            ok = (q.get("repo") == [url] and q.get("branch") == [cfg["branch"]]
                  and q.get("urlpath", [""])[0].endswith("/" + path))
        elif service == "Colab":
            ok = got.endswith(f"/github/{owner_repo}/blob/{cfg['branch']}/"
                              f"{path}")
        else:                            # Binder
            ok = (f"/{owner_repo}/{cfg['branch']}?" in got or
                  f"/{url}/{cfg['branch']}?" in got) and got.endswith(
                      "/" + path)
        if not ok:
            bad.append(f"{service} button {href} does not open {path} of "
                       f"{url} at {cfg['branch']}")
    extra = set(links) - set(cfg["services"])
    if extra:
        bad.append(f"launch buttons not in _config.yml: {sorted(extra)}")
    return bad


def check_download(site: Path, page_file: Path, source: Path | None,
                   hrefs: list[str]) -> list[str]:
    """The download menu offers the page's source file (the notebook, with
    its outputs, for a chapter), and the link opens that very file."""
    if source is None:
        return []
    want = "." + source.name.rsplit(".", 1)[1]
    for href in hrefs:
        target = (page_file.parent / unquote(urlsplit(href).path)).resolve()
        if target.name == source.name and target.is_file():
            if target.read_bytes() != source.read_bytes():
                return [f"download {href} is not the same file as {source}"]
            return []
    return [f"no download button for the {want} source (links: {hrefs})"]


def source_of(page: Path, site: Path, repo: Path) -> Path | None:
    """The notebook or Markdown file a built page came from."""
    stem = page.relative_to(site).with_suffix("")
    for ext in (".ipynb", ".md"):
        if (repo / stem).with_suffix(ext).exists():
            return (repo / stem).with_suffix(ext)
    return None


def _pipe_tables(text: str) -> int:
    return len(re.findall(r"^\s*\|.*\|\s*\n\s*\|\s*:?-{3,}", text, re.M))


def expected_tables(source: Path | None) -> int:
    """Tables the page must show: pipe tables written in Markdown, and
    outputs that carry an HTML table."""
    if source is None:
        return 0
    if source.suffix == ".md":
        return _pipe_tables(source.read_text(encoding="utf-8"))
    n = 0
    for cell in json.loads(source.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] == "markdown":
            n += _pipe_tables("".join(cell["source"]))
        for out in cell.get("outputs", []):
            html = "".join(out.get("data", {}).get("text/html", ""))
            n += html.count("<table")
    return n


def pages_to_check(site: Path, repo: Path
                   ) -> tuple[list[tuple[str, Path, Path | None]], list[str]]:
    """(page name, built file, source) for every toc entry and any other
    page the build wrote; and the toc entries that were not built."""
    pages, missing, seen = [], [], set()
    for stem, src in toc_pages(repo):
        path = site / f"{stem}.html"
        if path.is_file():
            pages.append((stem, path, src))
            seen.add(path.resolve())
        else:
            missing.append(f"{stem}: in _toc.yml, no {path} built")
    for path in sorted(site.rglob("*.html")):
        rel = path.relative_to(site)
        if path.resolve() in seen or path.name in SKIP_PAGES \
                or rel.parts[0].startswith("_"):
            continue
        pages.append((str(rel.with_suffix("")), path,
                      source_of(path, site, repo)))
    return pages, missing
