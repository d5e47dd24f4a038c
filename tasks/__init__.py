"""tasks: task records, shipped datasets and loaders, prompts, and answer grading.

    import tasks
    batch = tasks.load("countdown-train", limit=64)
    grades = tasks.grade_many(texts, [t.answer for t in batch])   # from any thread

Imports nothing else of this project; heavy modules (datasets, pyarrow, math-verify) load lazily.
"""

from tasks import catalog as _catalog  # noqa: F401 - registers the shipped datasets
from tasks.adapters import MissingExtraError, champ_tasks, reasoning_gym_tasks
from tasks.countdown import (
    countdown_candidates,
    countdown_solutions,
    countdown_splits,
    evaluate_expression,
    grade_countdown,
)
from tasks.export import save_parquet
from tasks.extract import Extraction, extract_answer, last_boxed
from tasks.generators import generate_split
from tasks.grading import DEFAULT_TIMEOUT, GRADERS, grade, grade_many, grade_task, grade_tasks
from tasks.loaders import TaskFileError, save_jsonl
from tasks.prompts import COT_SUFFIX, format_prompt, prompt_styles, system_prompt
from tasks.registry import DatasetInfo, list_datasets, load, register_dataset
from tasks.task import FAMILIES, Family, Grade, GradeStatus, Task
from tasks.verifier import VerifierPool, shared_pool

__all__ = [
    "COT_SUFFIX", "DEFAULT_TIMEOUT", "FAMILIES", "GRADERS", "DatasetInfo", "Extraction", "Family", "Grade",
    "GradeStatus", "MissingExtraError", "Task", "TaskFileError", "VerifierPool", "champ_tasks",
    "countdown_candidates", "countdown_solutions", "countdown_splits", "evaluate_expression",
    "extract_answer",
    "format_prompt", "generate_split", "grade", "grade_countdown", "grade_many", "grade_task", "grade_tasks",
    "last_boxed", "list_datasets", "load", "prompt_styles", "reasoning_gym_tasks", "register_dataset",
    "save_jsonl", "save_parquet", "shared_pool", "system_prompt",
]
