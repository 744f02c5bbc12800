"""Sizes in and out: one parser and one formatter for the whole kit."""
import pytest

from warmup_kit.units import human_bytes, parse_size


@pytest.mark.parametrize("text,nbytes", [
    ("8", 8), ("64K", 65536), ("64k", 65536), ("64KiB", 65536),
    ("64KB", 65536), ("1.5M", 3 << 19), ("16MiB", 16 << 20), ("1G", 1 << 30),
    (" 2g ", 2 << 30), ("0", 0), ("1T", 1 << 40), ("8B", 8)])
def test_parse_size(text, nbytes):
    assert parse_size(text) == nbytes


@pytest.mark.parametrize("text", ["3X", "", "K", "-8", "1.5", "abc", "1Q"])
def test_parse_size_refuses_with_what_it_accepts(text):
    with pytest.raises(ValueError, match="invalid size"):
        parse_size(text)


def test_parse_size_error_lists_the_suffixes():
    with pytest.raises(ValueError, match="K, M, G or T"):
        parse_size("3X")


def test_parse_size_multiple_of():
    assert parse_size("64K", multiple_of=8) == 65536
    with pytest.raises(ValueError, match="multiple of 8"):
        parse_size("12", multiple_of=8)


@pytest.mark.parametrize("nbytes,text", [
    (8, "8 B"), (1023, "1023 B"), (1024, "1 KiB"), (65536, "64 KiB"),
    (3 << 19, "1.5 MiB"), (1 << 30, "1 GiB"), (256 << 20, "256 MiB")])
def test_human_bytes(nbytes, text):
    assert human_bytes(nbytes) == text


@pytest.mark.parametrize("nbytes", [8, 4096, 65536, 1 << 20, 3 << 19,
                                    1 << 30])
def test_round_trip(nbytes):
    assert parse_size(human_bytes(nbytes).replace(" ", "")) == nbytes
