"""OpenRLHF's agent file (``--train.agent_func_path <this file>``): each sample's label (the gym task,
``--data.label_key gym_task``) runs through a gym agent's ``/run`` on the running ``gym run`` that
``$GYM_HEAD_URL`` names (``$GYM_AGENT``: the agent instance, default the task's ``agent_ref``, else
the config's only agent). See gym_train.openrlhf and docs/training.md, "Train with OpenRLHF"."""

from gym_train.openrlhf import GymAgentExecutor as AgentExecutor

__all__ = ["AgentExecutor"]
