import pytest

from server.routers.mac import InvalidMac, normalise_mac


@pytest.mark.parametrize("value", ["aa:bb:cc:dd:ee:0f", "AA:BB:CC:DD:EE:0F", "aa-bb-cc-dd-ee-0f",
                                   "AABB.CCDD.EE0F", "aabbccddee0f", " aabbccddee0f "])
def test_accepted_forms_normalise_to_lower_colon(value):
    assert normalise_mac(value) == "aa:bb:cc:dd:ee:0f"


@pytest.mark.parametrize("value", ["", "aa:bb:cc:dd:ee", "aa:bb:cc:dd:ee:ff:00", "zz:bb:cc:dd:ee:ff",
                                   "aa:bb-cc:dd:ee:ff", "aabb.ccdd.eeff.0011", "a:b:c:d:e:f",
                                   "aabbccddeef", "aa:bb:cc:dd:ee:ff\nx"])
def test_malformed_rejected(value):
    with pytest.raises(InvalidMac):
        normalise_mac(value)
