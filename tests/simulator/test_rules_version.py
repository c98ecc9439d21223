"""The simulator rules are numbered (simulator.semantics.RULES_VERSION, stored with every prediction so that
`pmdb predict --all` makes predictions of older rules again): a change to the rules file must say whether it moves
predicted times."""
import hashlib
from pathlib import Path

import simulator.semantics as semantics

# digest of simulator/semantics.py without its RULES_VERSION line -> the rules version that text implements
KNOWN = {"ca5339b163c875b88a0d820ebd1a5256ad8b721b20204bcdf03e4ced52cbb69a": 1,
         "1fbc9cc6e4d06edeb57415c7006ead13af6fedce50f71edddb7442bea3ca7494": 2,
         "60bff867e35a6d4a62beb6d58df01efa64642b38b5dcd95cf556795c5ab757b7": 3,
         "afe1d3ee56524bf398a3d717538c814b153681fc53c7ebba2475b0cb7182f56d": 4,
         "83c52fff1dbc43ae57afa60845ce3092304ecaf1e320af07314482191f984fa6": 5,
         "c444a4cd5d4bcc0c8b4104c902db4c058380c586f3cb77447ac925938fea1097": 6,
         "c040ef020ca70eb2d894c74382792ee9bd738c2d8a97db348678a672a2af9215": 7,
         "d3e9041148425f5743708dcffa29e38d74b71add59e3a57add90dbbb8b60cd25": 8,
         "f78395fc6449c9bc5c6a52531911391cfc0aecd725cd7991633e99c310b7feb5": 9,
         "9edbd92715431d11dbaf8afca58768828c0198079732f7d23fe8cb39acde3978": 10,
         "5f4906558ebc8b3a74cb7d5a6299e710cbe45b078d51aa01883ef83e01877172": 11,
         "f0f8a82d997c15cc30e266ee007990537acf4f8178b7e559a3c43e3fda851643": 12,
         "303356c2a4094c3704e8f1a380dce1ce6a53522114a1c54260e3c66628eaeca5": 13,
         "5b5618711634a2b649b1974dfb7d82e45fd91180989907d684c2bcc52fdbd835": 14,
         "e1dac5b6c0db8a3d56f2b6f9cf54761bdece3308f585f2a89a8cb6b4cb544103": 15,
         "852f851000dcab5f6f94dc0bc2c056763760b55ad628835b4276c0b14eb63d48": 16}


def test_a_change_to_the_rules_names_its_version():
    text = Path(semantics.__file__).read_text()
    digest = hashlib.sha256("\n".join(line for line in text.splitlines()
                                      if not line.startswith("RULES_VERSION")).encode()).hexdigest()
    assert KNOWN.get(digest) == semantics.RULES_VERSION, (
        f"simulator/semantics.py changed: if the change moves a predicted time, bump RULES_VERSION (stored "
        f"predictions of the old rules are then made again by `pmdb predict --all`); either way add "
        f"{digest!r}: {semantics.RULES_VERSION} (or the new version) to KNOWN")
