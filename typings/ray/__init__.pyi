# Ray is an optional extra (`pip install 'robotrl[ray]'`), imported only by
# robotrl.bringup.ray_cluster and ray_role when `robotrl up --ray` runs. This stub makes
# every attribute Any, so pyright passes with or without Ray installed.
from _typeshed import Incomplete

def __getattr__(name: str) -> Incomplete: ...
