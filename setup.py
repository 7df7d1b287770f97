"""Package discovery for the one `kelp` distribution.

`kelp.broker` lives in `broker/` and `kelp.operator` in `operator/` (design §1):
the operator can never be a top-level package called `operator`, the standard
library owns that name. setuptools' declarative `find` cannot map a
sub-package to another directory, so the mapping is computed here.
"""
from setuptools import find_packages, setup

MAPPED = {"kelp.broker": "broker", "kelp.operator": "operator"}

packages = find_packages(include=["kelp", "kelp.*"])
for name, directory in MAPPED.items():
    packages.append(name)
    packages.extend(f"{name}.{sub}" for sub in find_packages(directory))

setup(
    packages=packages,
    # Spark registers the `kelp` format by itself from a top-level `pyspark_*` module (kelp.spark).
    py_modules=["pyspark_kelp"],
    package_dir={"kelp": "kelp", **MAPPED},
    package_data={"kelp.operator": ["*.yaml"], "kelp.broker.kafka.messages": ["*.json"],
                  "kelp.broker.groups.consumer.schemas": ["*.json"],
                  "kelp.broker.groups.share.schemas": ["*.json"]},
)
