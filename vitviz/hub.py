"""Where a model's files come from: a local folder in save_pretrained layout, or the model hub (when it can be
reached, or from its cache); its preprocessor_config.json, and the transformers model and tokenizer loaded from
there. Fails fast offline; knows no model family."""

from __future__ import annotations

import json
import logging
import os
import socket
from pathlib import Path

log = logging.getLogger("vitviz")


class ModelUnavailableError(RuntimeError):
    """A model cannot be had here: no network for a hub model, or no safetensors."""


def read_preprocessor(name: str, source: str, kwargs: dict) -> dict | None:
    """The model's preprocessor_config.json (mean, std, size), or None where it has none."""
    try:
        if Path(source).is_dir():
            config_file = Path(source) / "preprocessor_config.json"
        else:
            from huggingface_hub import hf_hub_download

            config_file = Path(hf_hub_download(source, "preprocessor_config.json", **kwargs))
        return json.loads(config_file.read_text())
    except Exception:  # a missing or unreadable preprocessor file is normal: the family's defaults apply
        log.info("no preprocessor_config.json for %s; using the family's defaults", name)
        return None


def load_tokenizer(name: str):
    """The tokenizer saved beside a model with a text tower (a hub id or a local folder)."""
    from transformers import AutoTokenizer

    source, kwargs = pretrained_source(name)
    missing = (
        f"{name} has no tokenizer files: save its tokenizer beside the model (tokenizer.save_pretrained("
        "FOLDER)), or give the text as token ids"
    )
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=kwargs.get("local_files_only", False))
    except Exception as error:  # transformers raises OSError, ValueError or others for a folder without one
        raise ValueError(f"{missing} ({error.__class__.__name__})") from error
    if len(tokenizer) <= len(tokenizer.all_special_ids):  # without files, transformers makes one of its specials
        raise ValueError(missing)
    return tokenizer


def model_folder(name: str) -> Path | None:
    """The local folder that `name` names, or None for a hub id ("owner/name"). Checked without the network or any
    heavy import, so that a command refuses a bad name at once; a ValueError for a name that is neither."""
    path = Path(name).expanduser()
    if name.startswith((".", "/", "~")) or name.count("/") > 1:  # a path, never a hub id
        if not path.is_dir():
            raise ValueError(f"no such folder: {path} (a model folder in save_pretrained layout)")
    if path.is_dir():
        if not list(path.glob("*.safetensors")):
            raise ModelUnavailableError(f"{path} holds no .safetensors weights; vitviz never loads pickle files")
        return path
    if "/" in name and not path.exists():
        return None
    raise ValueError(f"unknown model {name!r}: use a catalogue name, a hub id or a folder")


def pretrained_source(name: str) -> tuple[str, dict]:
    """(source, from_pretrained kwargs) for a local folder or a hub id; fails fast when offline. Its messages name
    no option: the caller (a command, the app, Python) says how its user gives a folder."""
    folder = model_folder(name)
    if folder is not None:
        return str(folder), {"use_safetensors": True}
    if hub_reachable():
        return name, {}
    if hub_cached(name):
        return name, {"local_files_only": True}
    raise ModelUnavailableError(
        f"cannot download {name}: no network connection to the model hub. "
        "Connect once to download it, or give a local folder in save_pretrained layout instead."
    )


def hub_cached(repo_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:
        return False


def hub_reachable(timeout: float = 3.0) -> bool:
    """A quick TCP check so that offline machines fail fast instead of retrying for minutes."""
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", ""):
        return False
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").split("://")[-1].split("/")[0]
    try:
        socket.create_connection((endpoint, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def load_transformers(name: str) -> tuple:
    """(the model, its preprocessor_config.json or None) for a hub id or a local folder."""
    from transformers import AutoConfig, AutoModel, AutoModelForImageClassification

    source, kwargs = pretrained_source(name)
    config = AutoConfig.from_pretrained(source, local_files_only=kwargs.get("local_files_only", False))
    archs = getattr(config, "architectures", None) or []
    auto = AutoModelForImageClassification if any("Classification" in a for a in archs) else AutoModel
    net = auto.from_pretrained(source, attn_implementation="eager", **kwargs)
    return net, read_preprocessor(name, source, kwargs)
