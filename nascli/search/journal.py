"""The search journal: an append-only, durable log of events, the job's single source of truth.

A killed search must resume with nothing lost or repeated, so every state change is one event,
stored whole and durably before the caller acts on it, and the job's state is whatever
`replay(journal.events())` says (Optuna's JournalStorage model). Everything else in JOB_DIR
(trials.json, trials.csv, plots, HParams) is derived from it and can be rebuilt.

This module is the front door: `journal_for(job_dir)` picks the backend by the job dir's
scheme, and the names callers use are re-exported from the modules that do one job each (as
Optuna keeps its journal backends apart from the state they replay to):
  journal_file.py  a local job dir: JOB_DIR/journal.jsonl, fsynced JSON lines, the writer lock
  journal_gcs.py   a gs:// job dir: one object per event, JOB/journal/0000000001.json, ...
  job_state.py     the events, the trial state machine (JobState, replay) and the statuses
  job_settings.py  the settings' fingerprint, resume or refuse, and --overwrite
  journal_backends.py  the backend of a job dir by its scheme (`journal_for`)
"""

from __future__ import annotations

# The journal's public names, re-exported.
# pylint: disable=unused-import
from nascli.search.job_settings import DERIVED_OUTPUTS
from nascli.search.job_settings import check_settings
from nascli.search.job_settings import fingerprint
from nascli.search.job_settings import settings_diff
from nascli.search.job_state import COMPLETED
from nascli.search.job_state import FAILED
from nascli.search.job_state import FAILED_STATUSES
from nascli.search.job_state import FAILED_WITH_NAN
from nascli.search.job_state import FINAL_STATUSES
from nascli.search.job_state import INFEASIBLE
from nascli.search.job_state import INTERRUPTED
from nascli.search.job_state import MEASURED
from nascli.search.job_state import OVER_TARGET
from nascli.search.job_state import PAUSED
from nascli.search.job_state import PENDING
from nascli.search.job_state import RUNNING
from nascli.search.job_state import STOPPED
from nascli.search.job_state import TRAINED_FINAL_STATUSES
from nascli.search.job_state import UNFINISHED_STATUSES
from nascli.search.job_state import JobState
from nascli.search.job_state import Proposal
from nascli.search.job_state import replay
from nascli.search.journal_backends import journal_for
from nascli.search.journal_backends import scheme
from nascli.search.journal_file import JOURNAL_NAME
from nascli.search.journal_file import LOCK_NAME
from nascli.search.journal_file import Journal
from nascli.search.journal_file import writer_lock
from nascli.search.journal_gcs import ENTRIES_DIR
from nascli.search.journal_gcs import GcsJournal
from nascli.search.journal_gcs import staging_dir
# pylint: enable=unused-import
