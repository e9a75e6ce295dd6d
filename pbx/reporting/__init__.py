"""Reporting: what ``python -m pbx.report`` and the docs make of run folders, one module per concern.

- :mod:`~pbx.reporting.runs`: reading run and sweep folders;
- :mod:`~pbx.reporting.scores`: a run's headline numbers and the score statistics use (``--score``);
- :mod:`~pbx.reporting.pooling`: labels, and which runs are one experiment (fingerprints);
- :mod:`~pbx.reporting.games`: normalisation ranges across games, the published baseline;
- :mod:`~pbx.reporting.stats`: rliable's estimates and their measured coverage;
- :mod:`~pbx.reporting.study`: strategies x games x seeds and the numbers shown of them;
- :mod:`~pbx.reporting.tables`, :mod:`~pbx.reporting.plots`: Markdown/LaTeX tables and figures, drawing only;
- :mod:`~pbx.reporting.run_report`, :mod:`~pbx.reporting.comparison`: the files of one run, of a comparison;
- :mod:`~pbx.reporting.build`: from the folders given to the files written.
"""

from pbx.reporting.build import Options, default_out, generate
from pbx.reporting.pooling import member_kind, pool, run_labels
from pbx.reporting.runs import Run, load_run, load_sweep
from pbx.reporting.scores import LAST_K, SCORES, Headline, headline, run_score

__all__ = ["LAST_K", "SCORES", "Headline", "Options", "Run", "default_out", "generate", "headline", "load_run",
           "load_sweep", "member_kind", "pool", "run_labels", "run_score"]
