"""The ``safety_quality`` environment: reward = a safety judge's verdict × a quality judge's score."""
