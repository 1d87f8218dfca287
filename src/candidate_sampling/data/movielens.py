"""MovieLens-100K: 100,000 ratings (1–5) of 1,682 movies by 943 users, from a verified cache.

The two-tower retrieval chapters and the benchmarks use it; :func:`load_movielens_100k` is
the only entry point.

Where the data comes from, in order:

1. **The cache**: ``$CANDIDATE_SAMPLING_DATA`` if set, else ``~/.cache/candidate_sampling``
   (the ``cache_dir`` argument overrides both). A cached file is trusted only if its hash
   matches the published one *and* it parses to the expected counts; otherwise it is
   deleted (with a warning) and fetched again.
2. **GroupLens**, the official archive ``ml-100k.zip`` (md5 ``0e33842e…``), downloaded with
   pooch (temporary file, hash check, atomic rename, one retry) and a 5 s connect timeout,
   so a machine that cannot reach GroupLens moves on within seconds (about 1 s when the
   name does not resolve, at most about 11 s when connections hang).
3. **PyPI**: RecBole 1.2.1's wheel ships a copy of MovieLens-100K as "atomic files". It is
   fetched with ``python -m pip download`` (so your pip configuration, mirror and proxy
   apply), its sha256 is checked, and the two files are read straight from the wheel with
   :mod:`zipfile`. RecBole is *not* installed or imported. The copy has the same ratings in
   the same order; its item file drops the year from the title and misspells item 267's
   "unknown" as "unkonwn", which the reader undoes, so both sources give equal frames.

If every source fails, :class:`MovieLensUnavailable` says what each one answered and which
file to put where by hand.

What you get (:class:`MovieLens`):

* ``ratings``: one row per rating, file order: ``user_id``, ``item_id`` (the original
  1-based MovieLens ids of ``u.data``), ``rating`` (1–5), ``timestamp`` (Unix seconds);
  all ``int64``.
* ``items``: one row per movie, sorted by ``item_id``: ``item_id`` (``int64``), ``title``
  (the MovieLens title with its year, e.g. ``"Toy Story (1995)"``), ``year`` (nullable
  ``Int64``: the last "(YYYY)" in the title; ``<NA>`` for item 267, "unknown"),
  ``genres`` (a ``str``: the genre names joined by ``"|"`` in the order of ``u.genre``,
  e.g. ``"Animation|Children's|Comedy"``; a plain string keeps the frame flat;
  ``items.genres.str.split("|")`` gives lists).
* ``source``: which source answered, e.g. ``"GroupLens ml-100k.zip (cache)"``.
* ``path``: the verified file the frames were read from.

Terms of use (GroupLens, summarised; read the dataset's README for the full text): the
data may be used for research purposes only; it may not be redistributed without
GroupLens's permission (the book therefore never commits the data: every reader downloads
it); publications that use it must cite Harper & Konstan (2015), see
:data:`MOVIELENS_CITATION`; and neither the University of Minnesota nor GroupLens endorses
any product or service built with it. The dataset comes as is, without warranty.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shlex
import subprocess
import sys
import tempfile
import warnings
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pooch
import torch

from candidate_sampling._validate import (
    check_ids,
    check_int_range,
    check_parallel,
    check_real,
    check_seed,
    get_validate_args,
)

__all__ = [
    "DATA_ENV_VAR",
    "MOVIELENS_CITATION",
    "MOVIELENS_TERMS",
    "MovieLens",
    "MovieLensUnavailable",
    "default_cache_dir",
    "history_windows",
    "interactions",
    "load_movielens_100k",
    "random_split",
    "sequences",
]

MOVIELENS_CITATION = (
    "F. Maxwell Harper and Joseph A. Konstan. 2015. The MovieLens Datasets: History and "
    "Context. ACM Transactions on Interactive Intelligent Systems (TiiS) 5, 4, Article 19 "
    "(December 2015), 19 pages. https://doi.org/10.1145/2827872"
)
MOVIELENS_TERMS = (
    "MovieLens-100K is provided by GroupLens Research (University of Minnesota) for research "
    "use only. It may not be redistributed without GroupLens's permission, publications "
    "using it must cite Harper & Konstan (2015), and neither the University of Minnesota "
    "nor GroupLens endorses any product or service built with it. It comes as is, without "
    "warranty. Full terms: the README in https://files.grouplens.org/datasets/movielens/"
    "ml-100k.zip."
)

DATA_ENV_VAR = "CANDIDATE_SAMPLING_DATA"
DEFAULT_CACHE_DIR = Path("~/.cache/candidate_sampling")

# The genres of u.genre, in their order (flag columns 5..23 of u.item).
GENRES = (
    "unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime",
    "Documentary", "Drama", "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery",
    "Romance", "Sci-Fi", "Thriller", "War", "Western",
)  # fmt: skip

RATING_COLUMNS = ("user_id", "item_id", "rating", "timestamp")
ITEM_COLUMNS = ("item_id", "title", "year", "genres")

# Network settings: fail fast when offline, forgive a slow link once connected.
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 60.0
GROUPLENS_RETRIES = 1
PIP_TIMEOUT_S = 300.0

GROUPLENS_URL = "https://files.grouplens.org/datasets/movielens/ml-100k.zip"
GROUPLENS_MD5 = "md5:0e33842e24a9c977be4e0107933c0723"
RECBOLE_REQUIREMENT = "recbole==1.2.1"
RECBOLE_WHEEL = "recbole-1.2.1-py3-none-any.whl"
RECBOLE_SHA256 = "sha256:9c9948202011f37eb0a7c6768129313f00d6403ad221ec940d5e2d5d5f33a407"
RECBOLE_INTER = "recbole/dataset_example/ml-100k/ml-100k.inter"
RECBOLE_ITEM = "recbole/dataset_example/ml-100k/ml-100k.item"


@dataclass(frozen=True)
class Counts:
    """Sizes a parsed copy must have: ratings rows, distinct users, items (rows and ids)."""

    ratings: int
    users: int
    items: int


EXPECTED_COUNTS = Counts(ratings=100_000, users=943, items=1_682)


@dataclass(frozen=True, eq=False)
class MovieLens:
    """MovieLens-100K as two pandas frames; see the module docstring for the columns."""

    ratings: pd.DataFrame
    items: pd.DataFrame
    source: str
    path: Path

    @property
    def n_users(self) -> int:
        """Number of distinct users (943); user ids run from 1 to ``n_users``."""
        return int(self.ratings["user_id"].nunique())

    @property
    def n_items(self) -> int:
        """Number of movies (1,682); item ids run from 1 to ``n_items``."""
        return len(self.items)


class MovieLensUnavailable(RuntimeError):
    """No source could provide a verified copy of MovieLens-100K; the message says why."""


@dataclass(frozen=True)
class Source:
    """One place MovieLens-100K can come from, and the single cache file it leaves.

    ``fetch(source, cache_dir)`` must leave a file whose hash is ``known_hash`` at
    ``cache_dir / filename`` (atomically: nothing at that path unless it is complete and
    verified) or raise. ``read(path)`` parses that file into ``(ratings, items)``.
    """

    name: str
    filename: str
    known_hash: str  # "md5:…" or "sha256:…", as pooch writes it
    origin: str  # where it is fetched from, for messages
    manual: str  # how a person can get the file by hand; "{folder}" = the cache folder
    fetch: Callable[[Source, Path], None]
    read: Callable[[Path], tuple[pd.DataFrame, pd.DataFrame]]


# --------------------------------------------------------------------------- parsing


_YEAR = re.compile(r"\((\d{4})\)")


def _year_of(title: str) -> int | None:
    """The last "(YYYY)" in a MovieLens title ("… (1995) (V)" → 1995), or None."""
    years = _YEAR.findall(title)
    return int(years[-1]) if years else None


def _items_frame(item_id: Sequence, title: Sequence[str], genres: Sequence[str]) -> pd.DataFrame:
    titles = [str(t).strip() for t in title]
    items = pd.DataFrame(
        {
            "item_id": pd.Series(item_id).astype("int64").to_numpy(),
            "title": pd.Series(titles, dtype=object),
            "year": pd.array([_year_of(t) for t in titles], dtype="Int64"),
            "genres": pd.Series(list(genres), dtype=object),
        }
    )
    return items.sort_values("item_id", kind="stable").reset_index(drop=True)


def _as_int64(column: pd.Series, name: str) -> pd.Series:
    values = pd.to_numeric(column, errors="raise")
    if values.isna().any() or (values != values.round()).any():
        raise ValueError(f"column {name!r} has missing or non-integer values")
    return values.astype("int64")


def _ratings_frame(raw: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({name: _as_int64(raw[name], name) for name in RATING_COLUMNS})


def read_grouplens_zip(path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Parse GroupLens's ``ml-100k.zip``: ``ml-100k/u.data`` (tab-separated, no header) and
    ``ml-100k/u.item`` (``|``-separated, Latin-1: id, title, dates, IMDb URL, 19 genre flags).
    """
    with zipfile.ZipFile(path) as archive:
        with archive.open("ml-100k/u.data") as f:
            raw = pd.read_csv(f, sep="\t", header=None, names=list(RATING_COLUMNS))
        with archive.open("ml-100k/u.item") as f:
            text = io.TextIOWrapper(f, encoding="latin-1")
            item = pd.read_csv(
                text, sep="|", header=None, dtype=str, keep_default_na=False,
                quoting=csv.QUOTE_NONE,
            )  # fmt: skip
    if item.shape[1] != 5 + len(GENRES):
        raise ValueError(f"u.item has {item.shape[1]} fields per line, expected {5 + len(GENRES)}")
    flags = item.iloc[:, 5:].to_numpy() == "1"
    genres = ["|".join(g for g, on in zip(GENRES, row) if on) for row in flags]
    return _ratings_frame(raw), _items_frame(item[0], item[1], genres)


def _read_atomic(archive: zipfile.ZipFile, member: str) -> pd.DataFrame:
    """Read a RecBole atomic file: a tab-separated header of ``name:type`` fields, then rows."""
    with archive.open(member) as f:
        frame = pd.read_csv(
            io.TextIOWrapper(f, encoding="utf-8"), sep="\t", dtype=str, keep_default_na=False,
            quoting=csv.QUOTE_NONE,
        )  # fmt: skip
    frame.columns = [str(c).split(":", 1)[0] for c in frame.columns]
    return frame


def read_recbole_wheel(path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Parse MovieLens-100K from RecBole's wheel: ``ml-100k.inter`` and ``ml-100k.item``.

    ``.inter`` has ``user_id:token, item_id:token, rating:float, timestamp:float``, the rows
    of ``u.data`` in the same order. ``.item`` has ``item_id, movie_title, release_year,
    class``: the title without its trailing "(year)", that year (``"V"`` for item 1412,
    whose title ends "(1995) (V)"), and space-separated genres. The title is rebuilt as
    "title (year)", and item 267's "unkonwn" restored to "unknown", as in ``u.item``.
    """
    with zipfile.ZipFile(path) as archive:
        inter = _read_atomic(archive, RECBOLE_INTER)
        item = _read_atomic(archive, RECBOLE_ITEM)
    for frame, member, needed in (
        (inter, RECBOLE_INTER, RATING_COLUMNS),
        (item, RECBOLE_ITEM, ("item_id", "movie_title", "release_year", "class")),
    ):
        missing = [c for c in needed if c not in frame.columns]
        if missing:
            raise ValueError(f"{member} lacks the fields {missing}; it has {list(frame.columns)}")
    titles = []
    for title, year in zip(item["movie_title"], item["release_year"]):
        title, year = title.strip(), year.strip()
        if title == "unkonwn":  # RecBole's spelling of item 267's title, "unknown"
            title = "unknown"
        titles.append(f"{title} ({year})" if year and year != "unkonwn" else title)
    order = {g: i for i, g in enumerate(GENRES)}
    genres = []
    for names in item["class"]:
        unknown = [g for g in names.split() if g not in order]
        if unknown:
            raise ValueError(f"{RECBOLE_ITEM} has unknown genres {unknown}")
        genres.append("|".join(sorted(set(names.split()), key=order.__getitem__)))
    return _ratings_frame(inter), _items_frame(item["item_id"], titles, genres)


def _check(ratings: pd.DataFrame, items: pd.DataFrame, expected: Counts) -> None:
    """Raise ValueError unless the frames have the expected sizes and consistent ids."""
    found = Counts(ratings=len(ratings), users=int(ratings["user_id"].nunique()), items=len(items))
    if found != expected or ratings["item_id"].nunique() != expected.items:
        raise ValueError(
            f"parsed {found.ratings} ratings by {found.users} users of "
            f"{ratings['item_id'].nunique()} items, {found.items} item rows; expected "
            f"{expected.ratings} ratings, {expected.users} users, {expected.items} items"
        )
    if not items["item_id"].is_unique:
        raise ValueError("items has duplicate item ids")
    if not ratings["item_id"].isin(items["item_id"]).all():
        raise ValueError("ratings refer to item ids missing from items")
    if not ratings["rating"].between(1, 5).all():
        raise ValueError("ratings outside 1..5")


# --------------------------------------------------------------------------- fetching


def _http_downloader() -> Callable:
    """pooch's HTTP downloader with a (connect, read) timeout; tests replace this."""
    return pooch.HTTPDownloader(progressbar=False, timeout=(CONNECT_TIMEOUT_S, READ_TIMEOUT_S))


def fetch_grouplens(source: Source, cache_dir: Path) -> None:
    """Download GroupLens's zip into ``cache_dir`` with pooch (temp file, hash, rename)."""
    fetcher = pooch.create(
        path=cache_dir,
        base_url="",
        registry={source.filename: source.known_hash},
        urls={source.filename: source.origin},
        retry_if_failed=GROUPLENS_RETRIES,
    )
    fetcher.fetch(source.filename, downloader=_http_downloader())


def _pip_download(requirement: str, dest: Path) -> None:
    """``python -m pip download`` one wheel, no dependencies, into ``dest``; tests replace this."""
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "--no-input", requirement, "-d", str(dest),
    ]  # fmt: skip
    done = subprocess.run(
        command, check=False, capture_output=True, text=True, timeout=PIP_TIMEOUT_S
    )
    if done.returncode != 0:
        tail = " ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        shown = " ".join(["python", *command[1:]])
        raise RuntimeError(f"`{shown}` exited with {done.returncode}: {tail}")


def _verify_hash(path: Path, known_hash: str) -> None:
    """Raise ValueError unless ``path`` has ``known_hash`` ("alg:hexdigest")."""
    alg, _, digest = known_hash.partition(":")
    found = pooch.file_hash(str(path), alg=alg)
    if found != digest.lower():
        raise ValueError(f"{alg} of {path.name} is {found}, expected {digest}")


def fetch_recbole_wheel(source: Source, cache_dir: Path) -> None:
    """pip-download RecBole's wheel to a temporary folder in the cache, verify, rename."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".download-") as tmp:
        _pip_download(RECBOLE_REQUIREMENT, Path(tmp))
        wheel = Path(tmp) / source.filename
        if not wheel.is_file():
            raise RuntimeError(
                f"pip did not write {source.filename}; it wrote {sorted(os.listdir(tmp))}"
            )
        _verify_hash(wheel, source.known_hash)
        os.replace(wheel, cache_dir / source.filename)


GROUPLENS = Source(
    name="GroupLens ml-100k.zip",
    filename="ml-100k.zip",
    known_hash=GROUPLENS_MD5,
    origin=GROUPLENS_URL,
    manual=f"download {GROUPLENS_URL}",
    fetch=fetch_grouplens,
    read=read_grouplens_zip,
)
RECBOLE = Source(
    name="RecBole 1.2.1 wheel",
    filename=RECBOLE_WHEEL,
    known_hash=RECBOLE_SHA256,
    origin=f"PyPI, via `{Path(sys.executable).name} -m pip download {RECBOLE_REQUIREMENT}`",
    manual=(
        f"run `python -m pip download --no-deps --only-binary=:all: {RECBOLE_REQUIREMENT} "
        "-d {folder}`, or download it from https://pypi.org/project/recbole/1.2.1/#files"
    ),
    fetch=fetch_recbole_wheel,
    read=read_recbole_wheel,
)
# Tried in this order, first from the cache, then from the network.
SOURCES: tuple[Source, ...] = (GROUPLENS, RECBOLE)


# --------------------------------------------------------------------------- loading


def default_cache_dir() -> Path:
    """``$CANDIDATE_SAMPLING_DATA`` if set and non-empty, else ``~/.cache/candidate_sampling``."""
    env = os.environ.get(DATA_ENV_VAR, "").strip()
    return Path(env).expanduser() if env else DEFAULT_CACHE_DIR.expanduser()


def _load_verified(source: Source, path: Path, how: str) -> MovieLens:
    """Hash-check and parse ``path``; delete it and re-raise if any check fails."""
    try:
        _verify_hash(path, source.known_hash)
        ratings, items = source.read(path)
        _check(ratings, items, EXPECTED_COUNTS)
    except Exception:
        path.unlink(missing_ok=True)
        raise
    return MovieLens(ratings=ratings, items=items, source=f"{source.name} ({how})", path=path)


def _describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}".strip()


def load_movielens_100k(cache_dir: str | os.PathLike | None = None) -> MovieLens:
    """Load MovieLens-100K: 100,000 ratings of 1,682 movies by 943 users (retrieval chapters).

    Tries the cache first, then GroupLens, then RecBole's wheel from PyPI (see the module
    docstring); every file is hash-checked and the parsed counts are verified.

    Args:
        cache_dir: where downloads are kept. Default: ``$CANDIDATE_SAMPLING_DATA`` if set,
            else ``~/.cache/candidate_sampling``.

    Returns:
        :class:`MovieLens` with ``ratings`` (``user_id, item_id, rating, timestamp``; 100,000
        rows), ``items`` (``item_id, title, year, genres``; 1,682 rows), ``source``, ``path``.

    Raises:
        MovieLensUnavailable: no source gave a verified copy; the message lists each source
            tried, why it failed, and which file to place in which folder by hand.
    """
    folder = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    sources = SOURCES
    tried: list[str] = []
    for source in sources:
        path = folder / source.filename
        if not path.is_file():
            tried.append(f"cache: {path} is not there")
            continue
        try:
            return _load_verified(source, path, "cache")
        except Exception as err:  # noqa: BLE001 (any failure: distrust the file, go on)
            warnings.warn(
                f"deleted the cached {path} because it failed its check ({_describe(err)}); "
                "fetching it again",
                RuntimeWarning,
                stacklevel=2,
            )
            tried.append(f"cache: {path} failed its check and was deleted ({_describe(err)})")
    for source in sources:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            source.fetch(source, folder)
            return _load_verified(source, folder / source.filename, "download")
        except Exception as err:  # noqa: BLE001 (any failure: report it, try the next source)
            tried.append(f"{source.name} from {source.origin}: {_describe(err)}")
    raise MovieLensUnavailable(_unavailable_message(folder, sources, tried))


def _unavailable_message(folder: Path, sources: Sequence[Source], tried: Sequence[str]) -> str:
    lines = ["MovieLens-100K is not available. Tried, in order:"]
    lines += [f"  {i}. {attempt}" for i, attempt in enumerate(tried, 1)]
    lines.append(f"To provide it by hand, put one of these files in {folder}:")
    manual = [s.manual.replace("{folder}", shlex.quote(str(folder))) for s in sources]
    lines += [f"  - {s.filename} ({s.known_hash}): {m}" for s, m in zip(sources, manual)]
    lines.append(
        f"or set {DATA_ENV_VAR} (or pass cache_dir=) to a folder that holds one. "
        "The file is checked against the hash above before it is used."
    )
    return "\n".join(lines)


# --------------------------------------------------------------------------- tensors for training


def interactions(movielens: MovieLens) -> tuple[torch.Tensor, torch.Tensor]:
    """Every rating as a 0-based ``(user_index, item_index)`` pair of int64 tensors (n,).

    ``user_index = user_id − 1`` and ``item_index = item_id − 1``, in the order of
    ``movielens.ratings``; indices are what the models' embedding tables take.
    """
    if not isinstance(movielens, MovieLens):
        raise ValueError(f"movielens must be a MovieLens, got {type(movielens).__name__}")
    ratings = movielens.ratings
    users = torch.as_tensor(ratings["user_id"].to_numpy() - 1, dtype=torch.int64)
    items = torch.as_tensor(ratings["item_id"].to_numpy() - 1, dtype=torch.int64)
    return users, items


def random_split(
    num: int, *, train_fraction: float = 0.8, seed: int = 42
) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded random split of ``range(num)``: ``(train_index, test_index)``, int64.

    The first ``round(train_fraction · num)`` positions of a NumPy permutation
    (``default_rng(seed)``) are the training rows, the rest the test rows — TF
    Recommenders' tutorial's 80/20 split of MovieLens-100K with seed 42 (TF's own shuffle
    is another generator, so the rows differ; the statistics do not).
    """
    if isinstance(num, bool) or not isinstance(num, int) or num < 2:
        raise ValueError(f"num must be an int >= 2, got {num!r}")
    if not 0 < check_real("train_fraction", train_fraction) < 1:
        raise ValueError(f"train_fraction must lie in (0, 1), got {train_fraction!r}")
    cut = int(round(train_fraction * num))
    if not 0 < cut < num:
        raise ValueError(
            f"train_fraction={train_fraction!r} of num={num} leaves an empty split "
            f"({cut} training rows)"
        )
    order = torch.from_numpy(np.random.default_rng(check_seed(seed)).permutation(num))
    return order[:cut], order[cut:]


def history_windows(
    user_index: torch.Tensor, item_index: torch.Tensor, position: torch.Tensor, length: int
) -> torch.Tensor:
    """``(n, length)`` padded windows of the items *before* each event in a time-sorted log.

    ``user_index``, ``item_index``: (n,) events sorted by user, then time; ``position``:
    (n,) the event's 0-based position within its user's sequence. Row ``e`` holds the
    ``length`` items that precede event ``e`` in the same user's sequence, oldest first,
    left-padded with ``-1`` (the padding :class:`~candidate_sampling.models.UserTower`
    ignores). No window reaches into another user's events or starts at a negative index
    (the source post's slice did both).
    """
    check_parallel(
        "number of events n", user_index=user_index, item_index=item_index, position=position
    )
    check_int_range("length", length, 1)
    check_ids("item_index", item_index, None)  # -1 is the padding: an item is >= 0
    n = item_index.shape[0]
    first = torch.arange(n, device=item_index.device) - position  # each user's first event
    if get_validate_args() and n:
        # a position too large reaches before the log or into another user's events
        inside = (position >= 0) & (first >= 0)
        same_user = user_index[first.clamp(0, n - 1)] == user_index
        if not bool((inside & same_user).all()):
            raise ValueError(
                "position must count each event within its own user's sequence "
                "(0 at the user's first event), got a position that reaches another user"
            )
    window = (
        torch.arange(n, device=item_index.device)[:, None]
        - length
        + torch.arange(length, device=item_index.device)[None, :]
    )
    return torch.where(
        window >= first[:, None], item_index[window.clamp_min(0)], torch.full_like(window, -1)
    )


def sequences(movielens: MovieLens, length: int) -> dict[str, torch.Tensor]:
    """Each user's ratings in time order, with the history window before every event.

    Returns tensors of length n (all ratings): ``user_index``, ``item_index`` (the event's
    movie, the prediction target), ``position`` within the user's sequence,
    ``history`` (n, length) from :func:`history_windows`, and the boolean masks
    ``is_last`` (each user's last rating: the leave-last-out test event) and ``is_train``
    (every earlier event with at least one movie before it). Ties in time keep the file
    order (a stable sort).
    """
    if not isinstance(movielens, MovieLens):
        raise ValueError(f"movielens must be a MovieLens, got {type(movielens).__name__}")
    by_time = movielens.ratings.sort_values(["user_id", "timestamp"], kind="stable")
    user_index = torch.as_tensor(by_time["user_id"].to_numpy() - 1, dtype=torch.int64)
    item_index = torch.as_tensor(by_time["item_id"].to_numpy() - 1, dtype=torch.int64)
    position = by_time.groupby("user_id").cumcount().to_numpy(copy=True)  # writable (pandas 3)
    position = torch.as_tensor(position, dtype=torch.int64)
    is_last = torch.ones(len(item_index), dtype=torch.bool)
    is_last[:-1] = user_index[1:] != user_index[:-1]
    return {
        "user_index": user_index,
        "item_index": item_index,
        "position": position,
        "history": history_windows(user_index, item_index, position, length),
        "is_last": is_last,
        "is_train": (position >= 1) & ~is_last,
    }
