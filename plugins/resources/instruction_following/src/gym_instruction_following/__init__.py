"""The instruction_following environment: IFEval/IFBench-style verifiable instructions (spec §8)."""
