"""The small text the tiny model's BPE tokenizer is trained on.

Why it looks like this: the tokenizer only has to be *plausible* (common words, code and tool markup become
few tokens, so sequence lengths in tests and benchmarks resemble a real model's), while byte-level BPE
guarantees that any other text still round-trips. It is embedded, not downloaded, so the build works offline
and gives the same vocabulary on every machine. Changing it changes the recipe hash and so the cache dir.
"""

from __future__ import annotations

_ENGLISH = """\
You are a helpful assistant. Answer the question, and use a tool when it helps.
The user asks a question. The assistant thinks step by step, calls a tool, reads the result and answers.
What is the capital of France? The capital of France is Paris.
Which river flows through London? The Thames flows through London.
Who wrote the novel? The novel was written by an author who lived in the nineteenth century.
Please search for the population of the city and report the number you find.
The answer should be a single number. Put your final answer inside the answer tags.
If the tool returns an error, read the message carefully and try again with corrected arguments.
Let me think about this problem. First, I will compute the sum. Then I will check the result.
The function should return the sorted list without modifying the input.
The test failed because the expected value was different from the actual value.
The search results mention three documents. The first document is the most relevant one.
Thank you! The result is correct, so the task is complete and the episode ends here.
It is a sunny day; the weather is warm and the children are playing in the park.
Numbers, letters and symbols: a, b, c, x, y, z, (1), [2], {3}, "quoted", 'single', #hash, @at, $5.
Other languages: Bonjour, ça va? Grüße aus München. Привет, мир! 你好，世界。こんにちは。 😀 👍
Water boils at one hundred degrees Celsius at sea level, and freezes at zero degrees.
The Earth orbits the Sun once every year, and the Moon orbits the Earth about once every month.
A triangle has three sides, a square has four sides, and a hexagon has six sides.
Mount Everest is the highest mountain in the world, and the Pacific is the largest ocean.
Light travels faster than sound, which is why we see lightning before we hear thunder.
The library opens at nine in the morning and closes at six in the evening, except on Sundays.
She bought two apples, three oranges and a loaf of bread, then walked home through the market.
In the first chapter, the detective finds a letter; in the last chapter, she finally solves the mystery.
Computers store information as bits, and eight bits make one byte.
Programming languages such as Python, JavaScript, Rust and Go are used to build software.
An algorithm is a sequence of steps that solves a problem; its running time depends on the input size.
Sorting a list of numbers, searching a database and parsing a file are common programming tasks.
The training loop samples a batch of prompts, generates responses, computes rewards and updates the policy.
Reinforcement learning agents interact with an environment, observe the state and receive a reward.
Each episode has a maximum number of turns; when the limit is reached the episode is truncated.
The verifier compares the final answer with the reference answer and returns a score between zero and one.
Questions about history, science, geography, sports and music appear in the evaluation dataset.
How many days are there in a leap year? There are three hundred and sixty six days in a leap year.
When did the war end? The war ended after many years of fighting, when both sides signed a treaty.
Where is the museum located? The museum is located next to the old train station in the city center.
Why is the sky blue? Sunlight is scattered by the molecules of the air, and blue light is scattered most.
"""

_PYTHON = '''\
def add(a: int, b: int) -> int:
    """Return the sum of a and b."""
    return a + b


def fibonacci(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


class Stack:
    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)

    def pop(self):
        if not self.items:
            raise IndexError("pop from empty stack")
        return self.items.pop()


import json
import math

data = {"name": "calculator", "value": math.sqrt(16)}
print(json.dumps(data, indent=2))
numbers = [x * x for x in range(10) if x % 2 == 0]
print(sum(numbers), len(numbers), max(numbers))
with open("output.txt", "w") as f:
    f.write("hello world\\n")
try:
    result = int("42")
except ValueError as error:
    print(f"error: {error}")
assert add(2, 3) == 5


def is_prime(number: int) -> bool:
    if number < 2:
        return False
    for divisor in range(2, int(number ** 0.5) + 1):
        if number % divisor == 0:
            return False
    return True


def binary_search(values: list[int], target: int) -> int:
    low, high = 0, len(values) - 1
    while low <= high:
        middle = (low + high) // 2
        if values[middle] == target:
            return middle
        elif values[middle] < target:
            low = middle + 1
        else:
            high = middle - 1
    return -1


def count_words(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for word in text.lower().split():
        counts[word] = counts.get(word, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


from collections import Counter, defaultdict
from pathlib import Path

lines = Path("input.txt").read_text().splitlines()
total = 0
for index, line in enumerate(lines):
    if line.strip() and not line.startswith("#"):
        total += int(line)
print("total:", total)
groups = defaultdict(list)
for key, value in zip(["a", "b", "a"], [1, 2, 3]):
    groups[key].append(value)
print(Counter("mississippi").most_common(2))
matrix = [[row * col for col in range(3)] for row in range(3)]
print(matrix[1][2], sorted(set([3, 1, 2])), "-".join(map(str, [1, 2, 3])))
if __name__ == "__main__":
    print(is_prime(97), binary_search([1, 3, 5, 7], 5), count_words("the cat and the hat"))
'''

_TOOLS = """\
<think>
I need to compute the product first, so I will use the calculator.
</think>
<calculator>12 * 34 + 5</calculator>
<tool_response>
413
</tool_response>
<answer>413</answer>
<python>
print(sum(range(1, 101)))
</python>
<output>5050</output>
<search>capital of France</search>
<information>Doc 1 (Title: Paris) Paris is the capital and largest city of France.</information>
<answer>Paris</answer>
<tool_call>
{"name": "calculator", "arguments": {"expression": "(7 + 8) * 3"}}
</tool_call>
<tool_call>
{"name": "python", "arguments": {"code": "print(2 ** 10)"}}
</tool_call>
<tool_call>
{"name": "search", "arguments": {"query": "population of Tokyo", "top_k": 3}}
</tool_call>
{"type": "function", "function": {"name": "search", "description": "Search the knowledge base.",
"parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}
Error: invalid arguments. Expected a JSON object with "name" and "arguments".
<think>
The question asks for the year the bridge was opened. I should search before answering.
</think>
<search>year the Golden Gate Bridge opened</search>
<information>Doc 1 (Title: Golden Gate Bridge) The bridge opened to traffic in 1937.</information>
<answer>1937</answer>
<python>
import math
print(math.factorial(10), math.gcd(48, 18), round(math.pi, 4))
</python>
<output>3628800 6 3.1416</output>
<tool_response>
Traceback (most recent call last):
  File "<stdin>", line 1, in <module>
NameError: name 'x' is not defined
</tool_response>
<tool_call>
{"name": "get_weather", "arguments": {"city": "Berlin", "unit": "celsius"}}
</tool_call>
<tool_response>
{"temperature": 21, "condition": "cloudy", "humidity": 0.64}
</tool_response>
```python
def solve(values):
    return sum(values) / len(values)
```
"""


def _arithmetic() -> str:
    """A few hundred deterministic arithmetic facts: operators and ``=`` in the contexts math tasks use."""
    lines = []
    for a in range(3, 40, 7):
        for b in range(2, 30, 9):
            lines.append(f"{a} + {b} = {a + b}, {a} - {b} = {a - b}, {a} * {b} = {a * b}")
            lines.append(f"What is {a} times {b}? {a} * {b} = {a * b}. The answer is {a * b}.")
    lines.append("3.14 * 2 = 6.28; 1/2 = 0.5; 2^10 = 1024; sqrt(81) = 9; (1 + 2) * (3 - 4) = -3")
    return "\n".join(lines) + "\n"


def tiny_corpus() -> list[str]:
    """The training texts, in a fixed order (order matters for nothing in BPE counts, but keep it stable)."""
    return [_ENGLISH, _PYTHON, _TOOLS, _arithmetic()]
