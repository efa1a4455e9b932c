# pinocchio's API is a compiled extension without type stubs, so pyright sees none of its
# attributes. This stub makes every attribute Any instead of an error; submodules
# not stubbed here still resolve to the installed package.
from _typeshed import Incomplete

def __getattr__(name: str) -> Incomplete: ...
