"""Call a model server of a running `gym run` with the official openai client.

    python docs/examples/openai_client.py MODEL_PORT [HEAD_PORT]

MODEL_PORT: the model server's port (`gym status` lists them); HEAD_PORT: the head server's
(11000 unless the config says otherwise). The run's token, which `gym run` leaves in
$GYM_HOME/tokens/, is the API key.
"""

import sys

import openai

from gym_core.auth import gym_home, token_file

model_port, head_port = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 11000

# [client]
token = token_file(gym_home(), "127.0.0.1", head_port).read_text()
client = openai.OpenAI(base_url=f"http://127.0.0.1:{model_port}/v1", api_key=token)
# [/client]
print(client.responses.create(model="any", input="Say hello.").output_text)
