import sys

from producer.dashboard.cli import main

sys.exit(main())
