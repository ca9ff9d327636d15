"""Line parsing: every malformed shape is dropped with its reason; real shapes classify right."""

from __future__ import annotations

import pytest

from agent.requestlog.parse import Drop, LineParser, partitions_of, request_type_name

HEAD = b"[2026-11-21 05:25:09,167] DEBUG Completed request:"
TAIL = b" (kafka.request.logger)"
STAGES = (
    b',"connection":"127.0.0.1:9092-127.0.0.1:5000-0-1","totalTimeMs":7.5,"requestQueueTimeMs":0.5,'
    b'"localTimeMs":1.0,"remoteTimeMs":5.0,"throttleTimeMs":0,"responseQueueTimeMs":0.5,"sendTimeMs":0.5,'
    b'"securityProtocol":"PLAINTEXT","principal":"User:ANONYMOUS","listener":"PLAINTEXT",'
    b'"clientInformation":{"softwareName":"x","softwareVersion":"1"}}'
)


def line(api: bytes = b"PRODUCE", request: bytes = b'{"acks":-1}', stages: bytes = STAGES) -> bytes:
    header = (
        b'{"requestApiKey":0,"requestApiVersion":9,"correlationId":5,"clientId":"c1","requestApiKeyName":"%s"}'
        % api
    )
    return (
        HEAD
        + b'{"isForwarded":false,"requestHeader":'
        + header
        + b',"request":'
        + request
        + b',"response":{}'
        + stages
        + TAIL
    )


GOOD = line()

MALFORMED = [
    ("empty", b"", "not_a_request_line"),
    (
        "other logger line",
        b"[2026-11-21 05:25:09,167] INFO something else (kafka.server)",
        "not_a_request_line",
    ),
    ("no timestamp", GOOD[25:], "bad_timestamp"),
    ("bad timestamp", b"[2026-13-45 99:25:09,167]" + GOOD[25:], "bad_timestamp"),
    ("bad millis", GOOD[:21] + b"xyz" + GOOD[24:], "bad_timestamp"),
    ("truncated mid json", GOOD[:400], "truncated"),
    ("truncated before stages", GOOD[: GOOD.index(b',"connection"')], "truncated"),
    ("json garbage", HEAD + b"{not json}" + TAIL, "bad_json"),
    ("not utf-8", GOOD.replace(b'"c1"', b'"\xff\xfe"'), "not_utf8"),
    ("stage missing", line(stages=STAGES.replace(b'"sendTimeMs":0.5,', b"")), "missing_field"),
    (
        "stage not a number",
        line(stages=STAGES.replace(b'"localTimeMs":1.0', b'"localTimeMs":"1.0"')),
        "bad_field",
    ),
    ("stage null", line(stages=STAGES.replace(b'"localTimeMs":1.0', b'"localTimeMs":null')), "bad_field"),
    ("unknown request type", line(api=b"FROBNICATE"), "unknown_request_type"),
    ("huge line", line(request=b'{"pad":"' + b"x" * 3_000_000 + b'"}'), "too_long"),
]


@pytest.mark.parametrize(("name", "raw", "reason"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_lines_are_dropped_with_reason(name: str, raw: bytes, reason: str) -> None:
    with pytest.raises(Drop) as err:
        LineParser(max_line_bytes=1 << 20).parse(raw)
    assert err.value.reason == reason


def test_good_line_parses_every_stage() -> None:
    req = LineParser().parse(GOOD)
    assert req.request == "Produce"
    assert req.stages == (0.5, 1.0, 5.0, 0, 0.5, 0.5, 7.5)
    assert req.connection == "127.0.0.1:9092-127.0.0.1:5000-0-1"


FETCH_CASES = [
    ("consumer v12 replicaId -1", b'{"replicaId":-1,"maxWaitMs":500}', "FetchConsumer"),
    ("follower v12 replicaId 2", b'{"replicaId":2,"maxWaitMs":500}', "FetchFollower"),
    (
        "follower v15+ replicaState",
        b'{"replicaState":{"replicaId":2,"replicaEpoch":8},"maxWaitMs":500}',
        "FetchFollower",
    ),
    (
        "raft fetch clusterId then replicaState",
        b'{"clusterId":"abc","replicaState":{"replicaId":1,"replicaEpoch":-1},"maxWaitMs":500}',
        "FetchFollower",
    ),
    ("consumer v15+ no replicaState", b'{"maxWaitMs":500,"minBytes":1}', "FetchConsumer"),
    (
        "consumer whose rackId mentions replicaState",
        b'{"maxWaitMs":500,"rackId":"replicaState"}',
        "FetchConsumer",
    ),
]


@pytest.mark.parametrize(("name", "request_body", "expected"), FETCH_CASES, ids=[c[0] for c in FETCH_CASES])
def test_fetch_is_split_into_consumer_and_follower(name: str, request_body: bytes, expected: str) -> None:
    assert LineParser().parse(line(api=b"FETCH", request=request_body)).request == expected


def test_fake_connection_marker_in_client_software_name_falls_back_to_full_parse() -> None:
    tricky = STAGES.replace(b'"softwareName":"x"', b'"softwareName":"a\\",\\"connection\\":\\"z"')
    req = LineParser().parse(line(stages=tricky))
    assert req.stages[-1] == 7.5


def test_request_type_names_match_jmx() -> None:
    assert request_type_name("API_VERSIONS") == "ApiVersions"
    assert request_type_name("OFFSET_COMMIT") == "OffsetCommit"


def test_partitions_from_topic_ids_and_names() -> None:
    produce = line(
        request=b'{"topicData":[{"name":"t","partitionData":[{"index":1,"recordsSizeInBytes":80}]}]}'
    )
    body = produce[produce.index(b"{") : produce.rindex(b"}") + 1]
    assert partitions_of(body) == [{"topic": "t", "partition": 1, "bytes": 80}]
    fetch = b'{"request":{},"response":{"responses":[{"topicId":"5b21","partitions":[{"partitionIndex":0,"recordsSizeInBytes":9}]}]}}'
    assert partitions_of(fetch) == [{"topic": "id:5b21", "partition": 0, "bytes": 9}]
