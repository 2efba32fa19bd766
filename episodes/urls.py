app_name = "episodes"

urlpatterns = []
