"""Put on PYTHONPATH by weft launch: registers the torch.distributed backend "weft" when a
rank first imports torch.distributed (so that a PyTorch script needs only
init_process_group("weft")), then runs the sitecustomize it shadows (Debian's, if any)."""
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys


class _RegisterWeftBackend(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "torch.distributed":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            try:
                import weft_torch  # noqa: F401  (registers "weft")
            except Exception as e:  # torch without distributed support, or a broken build
                print(f"weft launch: the torch.distributed backend 'weft' is unavailable: {e}", file=sys.stderr)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _RegisterWeftBackend())

# The sitecustomize this one shadows (Debian's installs the apport hook).
_here = os.path.dirname(os.path.abspath(__file__))
_rest = [p for p in sys.path if os.path.abspath(p or ".") != _here]
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _rest)
if _spec is not None and _spec.loader is not None:
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)
