"""`magnetar zookeeper` runs a real server; chroots isolate tests."""

from kazoo.client import KazooClient

from magnetar import zookeeper as zk


def test_server_answers_and_chroot_isolates(zk_server, zk_connect) -> None:
    assert zk.four_letter_word(zk_server.host, zk_server.port, "ruok") == b"imok"
    client = KazooClient(hosts=zk_connect)
    client.start(timeout=10)
    try:
        client.create("/hello", b"world")
        assert client.get("/hello")[0] == b"world"
    finally:
        client.stop()
        client.close()
    chroot = zk_connect.split("/", 1)[1]
    root = KazooClient(hosts=zk_server.connect)
    root.start(timeout=10)
    try:
        assert root.exists(f"/{chroot}/hello") is not None
        assert root.exists("/hello") is None
    finally:
        root.stop()
        root.close()
