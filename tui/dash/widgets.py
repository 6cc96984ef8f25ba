"""The dashboard's panes, by name: where tests, benches and the app have always imported them.

Each pane lives in a module of its own (the job table in jobs_table.py with what its cells say
in job_cells.py, the targets in targets_table.py, the log in log_tail.py, the charts in
charts.py); this module only gathers their names, so `from tui.dash.widgets import JobsTable`
keeps working.
"""

from __future__ import annotations

from tui.dash.charts import Charts
from tui.dash.job_cells import (COMPACT_BELOW, COMPACT_COLUMNS, JOB_COLUMNS, LAST_WIDTH, failure_text,
                                group_cells, job_cells, last_metric_text, state_cell)
from tui.dash.jobs_table import JobsTable
from tui.dash.log_tail import LogTail
from tui.dash.targets_table import TargetsTable

__all__ = ["COMPACT_BELOW", "COMPACT_COLUMNS", "Charts", "JOB_COLUMNS", "JobsTable", "LAST_WIDTH", "LogTail",
           "TargetsTable", "failure_text", "group_cells", "job_cells", "last_metric_text", "state_cell"]
