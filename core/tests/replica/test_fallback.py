"""With the standby down, opted-in reads fall back to the primary (issue 12)."""

from core.tests.replica.standby import StandbyTestCase


class ReplicaDownTests(StandbyTestCase):
    def test_reads_fall_back_to_the_primary_when_the_standby_stops(self):
        """No 500 or 503: the health check finds the standby gone and the primary answers."""
        client = self.api(self.key)
        assert client.get("/api/names/").json()["server"] == "standby"

        self.standby.stop()
        response = client.get("/api/names/")

        assert response.status_code == 200
        assert response.json() == {"names": ["Acme"], "server": "primary"}
