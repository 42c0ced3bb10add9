"""SHA-256 of files and folders, as the manifests and provenance records hold them."""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: str | Path, chunk_bytes: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes, read in chunks of ``chunk_bytes`` bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk_bytes):
            digest.update(block)
    return digest.hexdigest()


def sha256_tree(folder: str | Path) -> dict[str, str]:
    """``{relative path: sha256}`` for every file below ``folder``, sorted by path."""
    folder = Path(folder)
    return {p.relative_to(folder).as_posix(): sha256_file(p)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def combined_sha256(hashes: dict[str, str]) -> str:
    """One SHA-256 over ``name  hash`` lines, the format of ``sha256sum``."""
    lines = "".join(f"{h}  {name}\n" for name, h in sorted(hashes.items()))
    return hashlib.sha256(lines.encode()).hexdigest()
