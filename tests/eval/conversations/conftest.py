"""Tiny files in the published formats of LoCoMo (locomo10.json) and LongMemEval (longmemeval_s.json),
written here: the real files are not committed (LoCoMo is CC BY-NC; LongMemEval sits on a hub)."""

from __future__ import annotations

import json

import pytest


def locomo_conversation(sample_id: str, a: str, b: str, topic: str) -> dict:
    return {
        "sample_id": sample_id,
        "conversation": {
            "speaker_a": a,
            "speaker_b": b,
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": a, "dia_id": "D1:1", "text": f"Hey {b}! How have you been?"},
                {"speaker": b, "dia_id": "D1:2", "text": "Busy! What did you do last weekend?"},
                {"speaker": a, "dia_id": "D1:3", "text": f"I went to a {topic} workshop, it was powerful."},
                {
                    "speaker": b,
                    "dia_id": "D1:4",
                    "text": "That's great, I painted a sunrise by the lake.",
                    "img_url": ["x"],
                    "blip_caption": "a painting of a sunrise over a lake",
                },
            ],
            "session_2_date_time": "10:37 am on 27 June, 2023",
            "session_2": [
                {"speaker": b, "dia_id": "D2:1", "text": "I signed up for a pottery class yesterday."},
                {"speaker": a, "dia_id": "D2:2", "text": "Which agencies did you research?"},
                {
                    "speaker": b,
                    "dia_id": "D2:3",
                    "text": "Adoption agencies, mostly the ones near the coast.",
                },
            ],
        },
        "qa": [
            {
                "question": f"When did {a} go to the {topic} workshop?",
                "answer": "7 May 2023",
                "evidence": ["D1:3"],
                "category": 2,
            },
            {"question": f"What did {b} paint?", "answer": "a sunrise", "evidence": ["D1:4"], "category": 4},
            {
                "question": f"What did {b} research?",
                "answer": "adoption agencies",
                "evidence": ["D2:2; D2:3"],
                "category": 1,
            },
            {
                "question": f"What class did {a} sign up for?",
                "evidence": ["D:2:1"],
                "category": 5,
                "adversarial_answer": "pottery",
            },
            {"question": "What is the weather like?", "answer": "n/a", "evidence": [], "category": 3},
        ],
        "event_summary": {},
        "observation": {},
        "session_summary": {},
    }


@pytest.fixture(scope="session")
def locomo_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("locomo") / "locomo10.json"
    data = [
        locomo_conversation("conv-1", "Caroline", "Melanie", "LGBTQ support"),
        locomo_conversation("conv-2", "Jon", "Gina", "dance"),
    ]
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def longmemeval_entry(qid: str, question: str, answer_session: str, filler: list[str]) -> dict:
    sessions = {
        "sharegpt_a_0": [
            {"role": "user", "content": "Can you recommend a pasta recipe?"},
            {"role": "assistant", "content": "Try carbonara with guanciale."},
        ],
        "ultrachat_b_1": [
            {"role": "user", "content": "How do I fix a flat bicycle tyre?"},
            {"role": "assistant", "content": "Patch the inner tube."},
        ],
        "ultrachat_c_2": [
            {"role": "user", "content": "What is the capital of Australia?"},
            {"role": "assistant", "content": "Canberra."},
        ],
        answer_session: [
            {
                "role": "user",
                "content": "I adopted a greyhound named Biscuit last month.",
                "has_answer": True,
            },
            {"role": "assistant", "content": "Congratulations on adopting Biscuit!"},
            {"role": "user", "content": "He loves the beach."},
        ],
    }
    ids = [*filler, answer_session]
    return {
        "question_id": qid,
        "question_type": "single-session-user",
        "question": question,
        "answer": "Biscuit",
        "question_date": "2023/06/01 (Thu) 10:00",
        "haystack_session_ids": ids,
        "haystack_dates": [f"2023/05/{10 + i:02d} (Wed) 09:{i:02d}" for i in range(len(ids))],
        "haystack_sessions": [sessions[s] for s in ids],
        "answer_session_ids": [answer_session],
    }


@pytest.fixture(scope="session")
def longmemeval_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("longmemeval") / "longmemeval_s.json"
    data = [
        longmemeval_entry(
            "q1", "What is the name of my dog?", "answer_x_1", ["sharegpt_a_0", "ultrachat_b_1"]
        ),
        longmemeval_entry(
            "q2_abs", "What is the name of my cat?", "answer_x_2", ["ultrachat_b_1", "ultrachat_c_2"]
        ),
    ]
    path.write_text(json.dumps(data), encoding="utf-8")
    return path
