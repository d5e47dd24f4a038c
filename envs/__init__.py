"""Gymnasium text environments with tools: the contract, tools, parsers, registry and checker.

Importing `envs` registers the catalogue below (ids in the `stare/` namespace, classes imported only
when made) and every third-party env of the `stare.envs` entry-point group.
"""

from envs.checker import check_env
from envs.core import ChatSpace, GradeInfo, Grader, Message, StepInfo, StepResult, TextEnv, TextSpace
from envs.errors import (
                         EnvCheckError,
                         EnvError,
                         EpisodeError,
                         RemoteEnvError,
                         ResetNeeded,
                         SandboxUnavailable,
                         ToolCrashed,
                         ToolError,
                         UnknownEnvError,
)
from envs.parsers import (
                         BlockParser,
                         HermesParser,
                         PythonBlockParser,
                         ToolCallError,
                         ToolCallParser,
                         get_parser,
)
from envs.registry import ENTRY_POINT_GROUP, discover, env_ids, list_envs, make, register
from envs.toolformats import FORMATS, AutoFormat, ToolFormat, detect_format  # registers the formats
from envs.tools import ToolCall, ToolOutcome, ToolSet, function_schema, truncate_middle

# ---- the catalogue -------------------------------------------------------------------------------
register("stare/MathCoT-v0", "envs.math_cot:MathCoTEnv")
register("stare/PythonTool-v0", "envs.python_tool:PythonToolEnv")
register("stare/Lookup-v0", "envs.lookup:LookupEnv")

discover()  # last: a plugin's hook may import `envs` and needs the names above

__all__ = [
    "ENTRY_POINT_GROUP", "FORMATS", "AutoFormat", "BlockParser", "ChatSpace", "EnvCheckError", "EnvError",
    "EpisodeError", "GradeInfo", "Grader", "HermesParser", "Message", "PythonBlockParser", "RemoteEnvError",
    "ResetNeeded", "SandboxUnavailable", "StepInfo", "StepResult",
    "TextEnv", "TextSpace", "ToolCall", "ToolCallError", "ToolCallParser", "ToolCrashed", "ToolError",
    "ToolFormat", "ToolOutcome", "ToolSet", "UnknownEnvError", "check_env", "detect_format", "discover",
    "env_ids", "function_schema",
    "get_parser", "list_envs", "make", "register", "truncate_middle",
]
