import sys

from ops.entry import main

sys.exit(main())
