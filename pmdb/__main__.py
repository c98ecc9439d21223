import sys

from pmdb.cli.main import main

sys.exit(main())
