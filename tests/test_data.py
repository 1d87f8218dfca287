"""MovieLens-100K loader and the tensors built from it. No network.

The loader: sources, cache, integrity checks, errors. Every loader test works on a tiny MovieLens built here twice, once as GroupLens's
``ml-100k.zip`` and once as RecBole's wheel, and swaps the module's sources, hashes and
expected counts for the fixture's. The network entry points (pooch's downloader and the pip
subprocess) are replaced by fakes in every test. The last test reads the real data, and
only runs when it is already in the cache. The helpers that turn ratings into training
tensors (``interactions``, ``random_split``, ``history_windows``, ``sequences``) are tested
on a small MovieLens built in memory, against Python loop references.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import requests
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from candidate_sampling.data import movielens as data

REAL_PIP_DOWNLOAD = data._pip_download

# The fixture: 4 movies (with the awkward titles of the real file) and 6 ratings by 3 users.
ITEMS = [
    (1, "Toy Story (1995)", ("Animation", "Children's", "Comedy")),
    (2, "unknown", ("unknown",)),
    (
        3,
        "Land Before Time III: The Time of the Great Giving (1995) (V)",
        ("Animation", "Children's"),
    ),
    (4, "Misérables, Les (1995)", ("Drama", "Musical")),
]
RATINGS = [
    (1, 1, 5, 881250949),
    (1, 2, 3, 891717742),
    (2, 3, 1, 878887116),
    (2, 4, 4, 880606923),
    (3, 1, 2, 886397596),
    (3, 4, 5, 884182806),
]
COUNTS = data.Counts(ratings=6, users=3, items=4)


def grouplens_zip_bytes() -> bytes:
    """``ml-100k.zip`` as GroupLens lays it out: tab-separated u.data, Latin-1 u.item."""
    u_data = "".join("\t".join(map(str, row)) + "\n" for row in RATINGS)
    u_item = ""
    for item_id, title, genres in ITEMS:
        flags = "|".join("1" if g in genres else "0" for g in data.GENRES)
        u_item += f"{item_id}|{title}|01-Jan-1995||http://us.imdb.com/M/title-exact?x|{flags}\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("ml-100k/u.data", u_data)
        archive.writestr("ml-100k/u.item", u_item.encode("latin-1"))
        archive.writestr("ml-100k/README", "fixture")
    return buffer.getvalue()


def recbole_wheel_bytes() -> bytes:
    """RecBole's wheel: atomic files with typed headers, titles split from their years."""
    inter = "user_id:token\titem_id:token\trating:float\ttimestamp:float\n"
    inter += "".join("\t".join(map(str, row)) + "\n" for row in RATINGS)
    item = "item_id:token\tmovie_title:token_seq\trelease_year:token\tclass:token_seq\n"
    for item_id, title, genres in ITEMS:
        if title == "unknown":
            name, year = "unkonwn", "unkonwn"  # RecBole's spelling
        else:
            name, _, year = title.rpartition(" (")
            year = year.rstrip(")")
        item += f"{item_id}\t{name}\t{year}\t{' '.join(reversed(genres))}\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("recbole/__init__.py", "")
        archive.writestr(data.RECBOLE_INTER, inter.encode("utf-8"))
        archive.writestr(data.RECBOLE_ITEM, item.encode("utf-8"))
    return buffer.getvalue()


def md5(raw: bytes) -> str:
    return "md5:" + hashlib.md5(raw).hexdigest()


def sha256(raw: bytes) -> str:
    return "sha256:" + hashlib.sha256(raw).hexdigest()


GROUPLENS_BYTES = grouplens_zip_bytes()
RECBOLE_BYTES = recbole_wheel_bytes()


def unreachable(source, cache_dir):
    raise ConnectionError(f"{source.name} is unreachable in this test")


class Fetches:
    """A fake fetch that writes ``raw`` to the cache (atomically enough for a test)."""

    def __init__(self, raw: bytes):
        self.raw, self.calls = raw, 0

    def __call__(self, source, cache_dir: Path) -> None:
        self.calls += 1
        (cache_dir / source.filename).write_bytes(self.raw)


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Fixture-sized data, no retries, and no way for a unit test to reach the network."""

    def no_pip(requirement, dest):
        raise AssertionError("a unit test tried to run pip")

    def no_http():
        raise AssertionError("a unit test tried to download over HTTP")

    monkeypatch.setattr(data, "_pip_download", no_pip)
    monkeypatch.setattr(data, "_http_downloader", no_http)
    monkeypatch.setattr(data, "EXPECTED_COUNTS", COUNTS)
    monkeypatch.setattr(data, "GROUPLENS_RETRIES", 0)
    monkeypatch.delenv(data.DATA_ENV_VAR, raising=False)


def use_sources(monkeypatch, grouplens_fetch=unreachable, recbole_fetch=unreachable):
    """Point the loader at the fixture's hashes, with the given fetch functions."""
    grouplens = dataclasses.replace(
        data.GROUPLENS, known_hash=md5(GROUPLENS_BYTES), fetch=grouplens_fetch
    )
    recbole = dataclasses.replace(
        data.RECBOLE, known_hash=sha256(RECBOLE_BYTES), fetch=recbole_fetch
    )
    monkeypatch.setattr(data, "SOURCES", (grouplens, recbole))
    return grouplens, recbole


# --------------------------------------------------------------------------- parsing


def test_grouplens_zip_parses_to_the_documented_columns(tmp_path):
    path = tmp_path / "ml-100k.zip"
    path.write_bytes(GROUPLENS_BYTES)
    ratings, items = data.read_grouplens_zip(path)

    assert list(ratings.columns) == list(data.RATING_COLUMNS)
    assert (ratings.dtypes == "int64").all()
    assert ratings.values.tolist() == [list(row) for row in RATINGS]
    assert list(items.columns) == list(data.ITEM_COLUMNS)
    assert items["item_id"].dtype == "int64"
    assert items["year"].dtype == "Int64"
    assert items["item_id"].tolist() == [1, 2, 3, 4]
    assert items["title"].tolist() == [title for _, title, _ in ITEMS]  # Latin-1 decoded
    assert items["year"].tolist() == [1995, pd.NA, 1995, 1995]
    assert items["genres"].tolist() == [
        "Animation|Children's|Comedy",
        "unknown",
        "Animation|Children's",
        "Drama|Musical",
    ]


def test_recbole_wheel_parses_to_the_same_frames_as_grouplens(tmp_path):
    (tmp_path / "gl.zip").write_bytes(GROUPLENS_BYTES)
    (tmp_path / "rb.whl").write_bytes(RECBOLE_BYTES)
    gl_ratings, gl_items = data.read_grouplens_zip(tmp_path / "gl.zip")
    rb_ratings, rb_items = data.read_recbole_wheel(tmp_path / "rb.whl")

    pd.testing.assert_frame_equal(rb_ratings, gl_ratings)
    pd.testing.assert_frame_equal(rb_items, gl_items)


def test_recbole_reader_names_missing_fields(tmp_path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(data.RECBOLE_INTER, "user_id:token\titem_id:token\n1\t2\n")
        archive.writestr(data.RECBOLE_ITEM, "item_id:token\n1\n")
    (tmp_path / "rb.whl").write_bytes(buffer.getvalue())
    with pytest.raises(ValueError, match="lacks the fields.*rating"):
        data.read_recbole_wheel(tmp_path / "rb.whl")


# --------------------------------------------------------------------------- cache


@pytest.mark.parametrize("which", ["grouplens", "recbole"])
def test_cache_hit_fetches_nothing(tmp_path, monkeypatch, which):
    grouplens, recbole = use_sources(monkeypatch)  # any fetch would raise
    source, raw = (grouplens, GROUPLENS_BYTES) if which == "grouplens" else (recbole, RECBOLE_BYTES)
    (tmp_path / source.filename).write_bytes(raw)

    movielens = data.load_movielens_100k(cache_dir=tmp_path)

    assert movielens.source == f"{source.name} (cache)"
    assert movielens.path == tmp_path / source.filename
    assert len(movielens.ratings) == COUNTS.ratings
    assert movielens.n_users == COUNTS.users and movielens.n_items == COUNTS.items


def test_corrupt_cache_is_deleted_and_fetched_again(tmp_path, monkeypatch):
    fetch = Fetches(GROUPLENS_BYTES)
    grouplens, _ = use_sources(monkeypatch, grouplens_fetch=fetch)
    (tmp_path / grouplens.filename).write_bytes(b"not a zip file at all")

    with pytest.warns(RuntimeWarning, match="failed its check"):
        movielens = data.load_movielens_100k(cache_dir=tmp_path)

    assert fetch.calls == 1
    assert movielens.source == f"{grouplens.name} (download)"
    assert (tmp_path / grouplens.filename).read_bytes() == GROUPLENS_BYTES


def test_truncated_cache_file_is_rejected_by_its_hash(tmp_path, monkeypatch):
    fetch = Fetches(RECBOLE_BYTES)
    _, recbole = use_sources(monkeypatch, recbole_fetch=fetch)
    (tmp_path / recbole.filename).write_bytes(RECBOLE_BYTES[: len(RECBOLE_BYTES) // 2])

    with pytest.warns(RuntimeWarning, match="sha256 of"):
        movielens = data.load_movielens_100k(cache_dir=tmp_path)

    assert fetch.calls == 1
    assert movielens.source == f"{recbole.name} (download)"


def test_bad_zip_is_rejected_even_when_its_hash_matches(tmp_path, monkeypatch):
    truncated = GROUPLENS_BYTES[:-40]  # cuts the zip's central directory
    grouplens, _ = use_sources(monkeypatch)
    monkeypatch.setattr(
        data, "SOURCES", (dataclasses.replace(grouplens, known_hash=md5(truncated)),)
    )
    (tmp_path / grouplens.filename).write_bytes(truncated)

    with (
        pytest.warns(RuntimeWarning, match="BadZipFile"),
        pytest.raises(data.MovieLensUnavailable, match="failed its check and was deleted"),
    ):
        data.load_movielens_100k(cache_dir=tmp_path)
    assert not (tmp_path / grouplens.filename).exists()


def test_wrong_counts_are_rejected(tmp_path, monkeypatch):
    grouplens, _ = use_sources(monkeypatch)
    (tmp_path / grouplens.filename).write_bytes(GROUPLENS_BYTES)
    monkeypatch.setattr(
        data, "EXPECTED_COUNTS", data.Counts(ratings=100_000, users=943, items=1_682)
    )

    with (
        pytest.warns(RuntimeWarning, match="parsed 6 ratings by 3 users"),
        pytest.raises(data.MovieLensUnavailable, match="expected 100000 ratings"),
    ):
        data.load_movielens_100k(cache_dir=tmp_path)


# --------------------------------------------------------------------------- cache folder


def test_default_cache_dir_is_under_home():
    assert data.default_cache_dir() == Path.home() / ".cache" / "candidate_sampling"


def test_env_var_overrides_the_default_cache_dir(tmp_path, monkeypatch):
    grouplens, _ = use_sources(monkeypatch)
    monkeypatch.setenv(data.DATA_ENV_VAR, str(tmp_path))
    (tmp_path / grouplens.filename).write_bytes(GROUPLENS_BYTES)

    assert data.default_cache_dir() == tmp_path
    assert data.load_movielens_100k().path == tmp_path / grouplens.filename


def test_cache_dir_argument_overrides_the_env_var(tmp_path, monkeypatch):
    grouplens, _ = use_sources(monkeypatch)
    monkeypatch.setenv(data.DATA_ENV_VAR, str(tmp_path / "elsewhere"))
    (tmp_path / grouplens.filename).write_bytes(GROUPLENS_BYTES)

    assert data.load_movielens_100k(cache_dir=tmp_path).path == tmp_path / grouplens.filename


# --------------------------------------------------------------------------- failures


def test_every_source_failing_raises_one_error_naming_each_and_the_manual_steps(
    tmp_path, monkeypatch
):
    grouplens, recbole = use_sources(monkeypatch)
    folder = tmp_path / "cache"

    with pytest.raises(data.MovieLensUnavailable) as caught:
        data.load_movielens_100k(cache_dir=folder)

    message = str(caught.value)
    assert isinstance(caught.value, RuntimeError)
    for needle in (
        f"cache: {folder / grouplens.filename} is not there",
        f"cache: {folder / recbole.filename} is not there",
        f"{grouplens.name} from {data.GROUPLENS_URL}: ConnectionError",
        f"{recbole.name} from PyPI",
        f"put one of these files in {folder}",
        "ml-100k.zip", "recbole-1.2.1-py3-none-any.whl", data.DATA_ENV_VAR,
        f"pip download --no-deps --only-binary=:all: recbole==1.2.1 -d {folder}`",
    ):  # fmt: skip
        assert needle in message
    assert message.count("unreachable in this test") == 2


# --------------------------------------------------------------------------- GroupLens via pooch


def test_grouplens_fetch_goes_through_pooch_and_checks_the_hash(tmp_path, monkeypatch):
    urls = []

    def downloader(url, output_file, pooch_instance):
        urls.append(url)
        Path(output_file).write_bytes(GROUPLENS_BYTES)

    monkeypatch.setattr(data, "_http_downloader", lambda: downloader)
    grouplens, _ = use_sources(monkeypatch, grouplens_fetch=data.fetch_grouplens)

    movielens = data.load_movielens_100k(cache_dir=tmp_path)

    assert urls == [data.GROUPLENS_URL]
    assert movielens.source == f"{grouplens.name} (download)"
    assert sorted(p.name for p in tmp_path.iterdir()) == [grouplens.filename]


def test_grouplens_download_with_a_wrong_hash_is_not_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(
        data, "_http_downloader",
        lambda: lambda url, output_file, _: Path(output_file).write_bytes(b"tampered"),
    )  # fmt: skip
    use_sources(monkeypatch, grouplens_fetch=data.fetch_grouplens)

    with pytest.raises(data.MovieLensUnavailable, match="(?i)md5 hash of downloaded file"):
        data.load_movielens_100k(cache_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_interrupted_grouplens_download_leaves_no_file(tmp_path, monkeypatch):
    def downloader(url, output_file, pooch_instance):
        Path(output_file).write_bytes(GROUPLENS_BYTES[:100])
        raise requests.exceptions.ConnectionError("connection reset mid-way")

    monkeypatch.setattr(data, "_http_downloader", lambda: downloader)
    use_sources(monkeypatch, grouplens_fetch=data.fetch_grouplens)

    with pytest.raises(data.MovieLensUnavailable, match="connection reset mid-way"):
        data.load_movielens_100k(cache_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []  # neither the final file nor a temporary one


# --------------------------------------------------------------------------- RecBole via pip


def test_recbole_fetch_downloads_verifies_and_moves_the_wheel(tmp_path, monkeypatch):
    calls = []

    def pip_download(requirement, dest):
        calls.append(requirement)
        (dest / data.RECBOLE_WHEEL).write_bytes(RECBOLE_BYTES)

    monkeypatch.setattr(data, "_pip_download", pip_download)
    _, recbole = use_sources(monkeypatch, recbole_fetch=data.fetch_recbole_wheel)

    movielens = data.load_movielens_100k(cache_dir=tmp_path)

    assert calls == ["recbole==1.2.1"]
    assert movielens.source == f"{recbole.name} (download)"
    assert sorted(p.name for p in tmp_path.iterdir()) == [data.RECBOLE_WHEEL]  # no temp folder


def test_recbole_wheel_with_a_wrong_hash_is_not_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(
        data, "_pip_download",
        lambda requirement, dest: (dest / data.RECBOLE_WHEEL).write_bytes(GROUPLENS_BYTES),
    )  # fmt: skip
    use_sources(monkeypatch, recbole_fetch=data.fetch_recbole_wheel)

    with pytest.raises(data.MovieLensUnavailable, match="sha256 of recbole-1.2.1"):
        data.load_movielens_100k(cache_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_interrupted_pip_download_leaves_no_file(tmp_path, monkeypatch):
    def pip_download(requirement, dest):
        (dest / data.RECBOLE_WHEEL).write_bytes(RECBOLE_BYTES[:1000])
        raise KeyboardInterrupt  # pip killed half-way through

    monkeypatch.setattr(data, "_pip_download", pip_download)
    use_sources(monkeypatch, recbole_fetch=data.fetch_recbole_wheel)

    with pytest.raises(KeyboardInterrupt):
        data.load_movielens_100k(cache_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_pip_download_runs_this_python_s_pip_without_deps(tmp_path, monkeypatch):
    seen = {}

    def run(command, **kwargs):
        seen["command"], seen["kwargs"] = command, kwargs
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(data.subprocess, "run", run)
    REAL_PIP_DOWNLOAD("recbole==1.2.1", tmp_path)

    command = seen["command"]
    assert command[:4] == [sys.executable, "-m", "pip", "download"]
    assert {"--no-deps", "--only-binary=:all:", "recbole==1.2.1"} <= set(command)
    assert command[-2:] == ["-d", str(tmp_path)]
    assert seen["kwargs"]["timeout"] == data.PIP_TIMEOUT_S


def test_pip_download_failure_reports_pip_s_error(tmp_path, monkeypatch):
    def run(command, **kwargs):
        return subprocess.CompletedProcess(
            command, 1, "", "Looking in indexes...\nERROR: No matching distribution found\n"
        )

    monkeypatch.setattr(data.subprocess, "run", run)
    with pytest.raises(RuntimeError, match="exited with 1: .*No matching distribution"):
        REAL_PIP_DOWNLOAD("recbole==1.2.1", tmp_path)


# --------------------------------------------------------------------------- terms


def test_citation_and_terms_are_exposed():
    assert "Harper" in data.MOVIELENS_CITATION and "10.1145/2827872" in data.MOVIELENS_CITATION
    terms = data.MOVIELENS_TERMS.lower()
    assert "research" in terms and "redistributed" in terms and "endorse" in terms
    assert "cite" in terms


# --------------------------------------------------------------------------- tensors for training

# Ratings in file order: users interleaved, timestamps out of order, ties in time (user 1's
# items 2 and 1 at t=200, user 2's items 3 and 4 at t=300), and user 3 with one rating.
SEQUENCE_RATINGS = [
    (2, 3, 4, 300),
    (1, 2, 5, 200),
    (2, 1, 3, 100),
    (1, 4, 2, 100),
    (3, 2, 1, 50),
    (1, 1, 4, 200),
    (2, 4, 5, 300),
    (1, 3, 3, 400),
]


def fake_movielens(rows=SEQUENCE_RATINGS) -> data.MovieLens:
    ratings = pd.DataFrame(rows, columns=list(data.RATING_COLUMNS)).astype("int64")
    items = pd.DataFrame(
        {
            "item_id": pd.Series([1, 2, 3, 4], dtype="int64"),
            "title": ["a (1995)", "b (1996)", "c (1997)", "d (1998)"],
            "year": pd.array([1995, 1996, 1997, 1998], dtype="Int64"),
            "genres": ["Drama", "Comedy", "Action", "War"],
        }
    )
    return data.MovieLens(ratings=ratings, items=items, source="test", path=Path("."))


def history_reference(user_index, item_index, length):
    """Loop reference: the ``length`` previous items of the same user, oldest first."""
    rows = []
    for e in range(len(user_index)):
        before = [int(item_index[j]) for j in range(e) if user_index[j] == user_index[e]]
        before = before[-length:]
        rows.append([-1] * (length - len(before)) + before)
    return torch.tensor(rows, dtype=torch.int64)


def positions_of(user_index):
    """0-based position of each event within its user's (contiguous) run of events."""
    out, count = [], {}
    for u in user_index.tolist():
        out.append(count.get(u, 0))
        count[u] = out[-1] + 1
    return torch.tensor(out, dtype=torch.int64)


def test_interactions_are_zero_based_pairs_in_file_order():
    movielens = fake_movielens()
    user_index, item_index = data.interactions(movielens)
    assert user_index.dtype == item_index.dtype == torch.int64
    assert user_index.tolist() == [u - 1 for u, _, _, _ in SEQUENCE_RATINGS]
    assert item_index.tolist() == [i - 1 for _, i, _, _ in SEQUENCE_RATINGS]


def test_interactions_rejects_anything_but_a_movielens():
    with pytest.raises(ValueError, match="movielens must be a MovieLens, got DataFrame"):
        data.interactions(fake_movielens().ratings)


@pytest.mark.parametrize(("num", "train_fraction"), [(10, 0.8), (7, 0.5), (100, 0.25), (2, 0.5)])
def test_random_split_sizes_cover_every_row_once(num, train_fraction):
    train_index, test_index = data.random_split(num, train_fraction=train_fraction)
    assert train_index.dtype == test_index.dtype == torch.int64
    assert len(train_index) == round(train_fraction * num)
    assert len(train_index) + len(test_index) == num
    both = torch.cat([train_index, test_index])
    assert sorted(both.tolist()) == list(range(num))  # disjoint and complete


def test_random_split_is_a_seeded_numpy_permutation():
    train_index, test_index = data.random_split(20)  # train_fraction=0.8, seed=42
    order = np.random.default_rng(42).permutation(20)
    assert train_index.tolist() == order[:16].tolist()
    assert test_index.tolist() == order[16:].tolist()
    again = data.random_split(20)
    assert torch.equal(again[0], train_index) and torch.equal(again[1], test_index)
    other = data.random_split(20, seed=7)
    assert not torch.equal(other[0], train_index)
    assert torch.equal(other[0], data.random_split(20, seed=7)[0])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num": 1}, "num must be an int >= 2"),
        ({"num": True}, "num must be an int >= 2"),
        ({"num": 10.0}, "num must be an int >= 2"),
        ({"num": 10, "train_fraction": 0.0}, "train_fraction must lie in \\(0, 1\\)"),
        ({"num": 10, "train_fraction": 1.0}, "train_fraction must lie in \\(0, 1\\)"),
        ({"num": 10, "train_fraction": -0.5}, "train_fraction must lie in \\(0, 1\\)"),
        ({"num": 2, "train_fraction": 0.1}, "leaves an empty split"),
        ({"num": 10, "train_fraction": 0.99}, "leaves an empty split"),
    ],
)
def test_random_split_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        data.random_split(**kwargs)


def test_random_split_options_are_keyword_only():
    with pytest.raises(TypeError):
        data.random_split(10, 0.5)


def test_history_windows_on_a_small_log():
    user_index = torch.tensor([0, 0, 0, 0, 1, 1, 2])
    item_index = torch.tensor([5, 6, 7, 8, 1, 2, 3])
    windows = data.history_windows(user_index, item_index, positions_of(user_index), 3)
    assert windows.tolist() == [
        [-1, -1, -1],
        [-1, -1, 5],
        [-1, 5, 6],
        [5, 6, 7],
        [-1, -1, -1],  # user 1's first event: nothing of user 0 leaks in
        [-1, -1, 1],
        [-1, -1, -1],
    ]
    # a position that reaches before the user's first event (or before the log) is refused
    with pytest.raises(ValueError, match="position must count each event within its own user"):
        data.history_windows(user_index, item_index, torch.tensor([0, 1, 2, 3, 5, 1, 0]), 3)
    with pytest.raises(ValueError, match="position must count"):
        data.history_windows(user_index, item_index, torch.tensor([1, 1, 2, 3, 0, 1, 0]), 3)
    with pytest.raises(ValueError, match="position must count"):
        data.history_windows(user_index, item_index, torch.tensor([0, 1, 2, 3, 0, 1, -1]), 3)


@settings(max_examples=40, deadline=None)
@given(
    run_lengths=st.lists(st.integers(1, 8), min_size=1, max_size=6),
    length=st.integers(1, 6),
    seed=st.integers(0, 10_000),
)
def test_history_windows_match_the_loop_reference(run_lengths, length, seed):
    user_index = torch.repeat_interleave(torch.arange(len(run_lengths)), torch.tensor(run_lengths))
    g = torch.Generator().manual_seed(seed)
    item_index = torch.randint(0, 50, (len(user_index),), generator=g)
    got = data.history_windows(user_index, item_index, positions_of(user_index), length)
    assert got.dtype == torch.int64 and got.shape == (len(user_index), length)
    assert torch.equal(got, history_reference(user_index, item_index, length))


def test_history_windows_errors():
    users, items = torch.tensor([0, 0, 1]), torch.tensor([4, 5, 6])
    position = positions_of(users)
    with pytest.raises(ValueError, match="length must be >= 1"):
        data.history_windows(users, items, position, 0)
    with pytest.raises(ValueError, match="length must be an int"):
        data.history_windows(users, items, position, 2.0)
    with pytest.raises(ValueError, match="number of events n must agree"):
        data.history_windows(users, items[:2], position, 2)
    with pytest.raises(ValueError, match="item_index must be an integer tensor"):
        data.history_windows(users, items.float(), position, 2)
    with pytest.raises(ValueError, match="user_index must have shape \\(n,\\), got \\(1, 3\\)"):
        data.history_windows(users[None], items, position, 2)


def test_sequences_sort_by_user_then_time_keeping_file_order_for_ties():
    out = data.sequences(fake_movielens(), 2)
    assert set(out) == {"user_index", "item_index", "position", "history", "is_last", "is_train"}
    assert out["user_index"].tolist() == [0, 0, 0, 0, 1, 1, 1, 2]
    assert out["item_index"].tolist() == [3, 1, 0, 2, 0, 2, 3, 1]
    assert out["position"].tolist() == [0, 1, 2, 3, 0, 1, 2, 0]
    assert out["history"].tolist() == [
        [-1, -1], [-1, 3], [3, 1], [1, 0], [-1, -1], [-1, 0], [0, 2], [-1, -1],
    ]  # fmt: skip
    assert out["history"].dtype == torch.int64


def test_sequences_last_and_train_masks():
    """is_last: each user's latest rating (the test event); is_train: every earlier event
    with at least one movie before it. A user with one rating is test-only."""
    out = data.sequences(fake_movielens(), 3)
    assert out["is_last"].dtype == out["is_train"].dtype == torch.bool
    assert out["is_last"].tolist() == [False, False, False, True, False, False, True, True]
    assert out["is_train"].tolist() == [False, True, True, False, False, True, False, False]
    assert not bool((out["is_last"] & out["is_train"]).any())
    users = out["user_index"]
    assert torch.equal(users[out["is_last"]], torch.unique(users))  # one last event per user
    assert torch.equal(out["history"], history_reference(users, out["item_index"], 3))
    trained = out["history"][out["is_train"]]
    assert bool((trained[:, -1] >= 0).all())  # a training event has a movie before it


def test_sequences_errors():
    with pytest.raises(ValueError, match="length must be >= 1"):
        data.sequences(fake_movielens(), 0)
    with pytest.raises(ValueError, match="movielens must be a MovieLens"):
        data.sequences(fake_movielens().ratings, 2)


# --------------------------------------------------------------------------- real data


def _cached_real_file() -> Path | None:
    folder = data.default_cache_dir()
    for source in data.SOURCES:
        if (folder / source.filename).is_file():
            return folder / source.filename
    return None


@pytest.mark.skipif(
    _cached_real_file() is None,
    reason=(
        f"MovieLens-100K is not in the cache ({data.default_cache_dir()}); run "
        "`python -c 'from candidate_sampling.data.movielens import load_movielens_100k as f; f()'` "
        "(CI does this through the book) to test the real data"
    ),
)
def test_real_movielens_100k_from_the_cache(monkeypatch):
    monkeypatch.setattr(data, "EXPECTED_COUNTS", data.Counts(100_000, 943, 1_682))
    movielens = data.load_movielens_100k()
    ratings, items = movielens.ratings, movielens.items

    assert movielens.source.endswith("(cache)")
    assert ratings.shape == (100_000, 4) and items.shape == (1_682, 4)
    assert ratings["user_id"].min() == 1 and ratings["user_id"].max() == 943
    assert items["item_id"].tolist() == list(range(1, 1_683))
    # Published figures: mean rating 3.52986 and its histogram over 1..5.
    assert ratings["rating"].mean() == pytest.approx(3.52986)
    assert ratings["rating"].value_counts().sort_index().tolist() == [
        6_110,
        11_370,
        27_145,
        34_174,
        21_201,
    ]
    assert ratings.iloc[0].tolist() == [196, 242, 3, 881250949]  # first line of u.data
    assert items.loc[0, "title"] == "Toy Story (1995)"
    assert items.loc[0, "genres"] == "Animation|Children's|Comedy"
    assert items["year"].isna().sum() == 1 and items.loc[266, "title"] == "unknown"

    user_index, item_index = data.interactions(movielens)
    assert user_index.shape == item_index.shape == (100_000,)
    assert (int(user_index.min()), int(user_index.max())) == (0, 942)
    assert (int(item_index.min()), int(item_index.max())) == (0, 1_681)
    train_index, test_index = data.random_split(100_000)
    assert len(train_index) == 80_000 and len(test_index) == 20_000
    seq = data.sequences(movielens, 10)
    assert int(seq["is_last"].sum()) == 943  # one test event per user
    assert int(seq["is_train"].sum()) == 100_000 - 2 * 943  # not first, not last
    assert bool((seq["position"][seq["is_last"]] >= 19).all())  # every user rated >= 20
