"""The mcqa environment: multiple-choice QA graded by the extracted option letter."""
