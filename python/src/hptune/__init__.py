"""Drive the hptune hyperparameter tuner from Python.

Workers that ``hptune run`` starts report with :func:`report` and read their
parameters with :func:`params`. Programs that want a configuration and give back
its result drive a study through :class:`Study` (``ask``, ``tell``, ``optimize``),
which runs the ``hptune`` binary and reads its JSON: the sampler, the budget and
the storage are the binary's, never a second copy in Python.
"""

from hptune._binary import AllLeased, BudgetSpent, HptuneError, find_binary
from hptune._study import Study, Trial
from hptune._worker import ParamValue, params, report

__all__ = [
    "AllLeased",
    "BudgetSpent",
    "HptuneError",
    "ParamValue",
    "Study",
    "Trial",
    "find_binary",
    "params",
    "report",
]
