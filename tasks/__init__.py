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
from tasks.prompts import (
    COT_SUFFIX,
    check_prompt_template,
    format_prompt,
    prompt_styles,
    system_prompt,
    user_prompt,
)
from tasks.registry import DatasetInfo, list_datasets, load, load_cached, register_dataset
from tasks.task import FAMILIES, Family, Grade, GradeStatus, Task
from tasks.verifier import VerifierPool, shared_pool

__all__ = [
    "COT_SUFFIX", "DEFAULT_TIMEOUT", "DatasetInfo", "Extraction", "FAMILIES", "Family", "GRADERS", "Grade",
    "GradeStatus", "MissingExtraError", "Task", "TaskFileError", "VerifierPool", "champ_tasks",
    "check_prompt_template", "countdown_candidates", "countdown_solutions", "countdown_splits",
    "evaluate_expression", "extract_answer", "format_prompt", "generate_split", "grade", "grade_countdown",
    "grade_many", "grade_task", "grade_tasks", "last_boxed", "list_datasets", "load", "load_cached",
    "prompt_styles", "reasoning_gym_tasks", "register_dataset", "save_jsonl", "shared_pool",
    "system_prompt", "user_prompt",
    "save_parquet",
]
